"""`python -m docgen`: write the generated reference pages into docs/reference/."""

from __future__ import annotations

from docgen import write

if __name__ == "__main__":
    for path in write():
        print(path)
