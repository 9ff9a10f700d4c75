"""Every figure of the project, written as PNG files; the only package that imports matplotlib.

One module per regime (`theory`, `vision`, `shallow`, `analysis`): library code returns arrays and
dictionaries, binaries hand them to these functions. Figures are built as `matplotlib.figure.Figure`
objects, not through pyplot, so importing or calling them never changes the user's matplotlib backend
(a notebook keeps its inline backend) and they render on headless machines (CI, TPU hosts).
"""
