"""python -m qkern info: what `qk info` prints (the build, its op -> provider table and
the serving layer's backend registry). python -m qkern bench: the per-call overhead of the
binding against the C call, with torch's and the engines' ops beside it."""
import sys

from . import _qkern


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv in ([], ["info"]):
        sys.stdout.write(_qkern.info())
        return 0
    if argv[:1] == ["bench"]:
        from . import _bench
        return _bench.main(argv[1:])
    sys.stderr.write("usage: python -m qkern info | bench [--number N] [--repeat R]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
