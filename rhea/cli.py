"""`rhea` console script (filled in by the modeling and chat code)."""
import sys


def main(argv=None) -> int:
    print("rhea: no commands yet", file=sys.stderr)
    return 2
