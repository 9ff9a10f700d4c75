"""Every figure of the project, written as PNG files; the only package that imports matplotlib.

One module per regime (`theory`, `vision`, `shallow`, `analysis`): library code returns arrays and
dictionaries, binaries hand them to these functions. Figures are built as `matplotlib.figure.Figure`
objects, not through pyplot, so importing or calling them never changes the user's matplotlib backend
(a notebook keeps its inline backend) and they render on headless machines (CI, TPU hosts).
"""

import io as _bytes_io

from posattn import io

DPI = 120


def save_png(fig, path, dpi: int = DPI, **savefig_kwargs) -> None:
    """Write `fig` (a `matplotlib.figure.Figure`) as a PNG file at `path`, atomically
    (`posattn.io.write_bytes`), as every figure of the project is written."""
    buffer = _bytes_io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, **savefig_kwargs)
    io.write_bytes(path, buffer.getvalue())
