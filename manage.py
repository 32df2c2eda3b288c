#!/usr/bin/env python
"""Django's command-line entry. platform/ is a source root, never a package: putting it on
sys.path lets `import paddock` work without shadowing the standard library's `platform`."""

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "platform"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
