"""``python -m hub``: a command-line tool, run from the repository root, to check a saved
alphagrad model and push it to the Hugging Face Hub (see ``hub/__main__.py``). It is not
installed with alphagrad; the library's hub code lives in ``alphagrad.hub`` (format,
files and card)."""
