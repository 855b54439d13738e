# Sourced by the device scripts: `carried PATH` makes PATH an executable,
# unpacking PATH.xz or PATH.gz (carried compressed: the device's carry limit;
# xz packs the tests ~8 % smaller) when PATH is not one already. Returns
# non-zero when none is there.
unxz_to() { # SRC.xz DST: xz where installed, else Python's lzma
  if command -v xz > /dev/null; then xz -dc "$1" > "$2"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; fi
}
carried() {
  [ -x "$1" ] && return 0
  if [ -f "$1.xz" ]; then unxz_to "$1.xz" "$1"; else gunzip -kf "$1.gz"; fi && chmod +x "$1"
}
