"""Sub-commands of the `judgekit` CLI; each module defines `register(subparsers)`."""
