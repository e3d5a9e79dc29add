"""The jupytext notebooks (`NN_name.py`); shipped as `toolkit._notebooks` for `kvtk notebooks`."""
