"""The `kvtk` command line. Each sub-command lives in its own module with `register(subparsers)`."""
