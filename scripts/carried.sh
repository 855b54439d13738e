# Sourced by the device scripts: `carried PATH` makes PATH an executable,
# unpacking PATH.gz (carried gzipped: the device's carry limit) when PATH is
# not one already. Returns non-zero when neither is there.
carried() {
  [ -x "$1" ] || { gunzip -kf "$1.gz" && chmod +x "$1"; }
}
