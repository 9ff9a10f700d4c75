"""docs/quickstart.ipynb runs from top to bottom (theory regime, image model, one analysis)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quickstart_notebook_runs():
    notebook = nbformat.read(ROOT / "docs" / "quickstart.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "patch association in every row: True" in outputs
    assert "block_00" in outputs and "gap" in outputs
