"""Reading `moe_ep bench --out` files (markdown): shared by bench_compare.py
and issue_tables.py."""


def table_rows(path):
    """(column names, cells) of every data row of every table in the file;
    names and cells both begin with geometry and T (T a decimal string)."""
    head = None
    for line in open(path):
        if line.startswith('| geometry'):
            head = [c.strip() for c in line.strip().strip('|').split('|')]
        elif line.startswith('| ') and head and not line.startswith('|---'):
            row = [c.strip() for c in line.strip().strip('|').split('|')]
            if len(row) == len(head) and row[1].isdigit():
                yield head, row
