"""`python -m docgen`: write the generated reference pages into docs/reference/ and draw docs/dataflow.png."""

from __future__ import annotations

from docgen import draw_data_flow, draw_watch_stream, write

if __name__ == "__main__":
    for path in write():
        print(path)
    print(draw_data_flow())
    print(draw_watch_stream())
