"""python -m qkern info: what `qk info` prints (the build, its op -> provider table and
the serving layer's backend registry)."""
import sys

from . import _qkern


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv in ([], ["info"]):
        sys.stdout.write(_qkern.info())
        return 0
    sys.stderr.write("usage: python -m qkern info\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
