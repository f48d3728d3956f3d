"""A launcher like `npx`: runs its arguments as a child that inherits its stdin, stdout and
stderr, and exits with the child's status. Killing the launcher leaves the child holding the pipes."""

import subprocess
import sys

if __name__ == "__main__":
    sys.exit(subprocess.call(sys.argv[1:]))
