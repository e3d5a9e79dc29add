"""The one thing pyproject.toml cannot declare: the top-level `data/`, `kernels/` and `notebooks/` folders ship
inside the package as `toolkit._data`, `toolkit._kernels` and `toolkit._notebooks` (read by `toolkit.locations`).
Everything else about the package is in pyproject.toml."""

from setuptools import find_packages, setup

SHIPPED_DIRS = {"toolkit._data": "data", "toolkit._kernels": "kernels", "toolkit._notebooks": "notebooks"}

setup(
    packages=find_packages(include=["toolkit", "toolkit.*"]) + list(SHIPPED_DIRS),
    package_dir=SHIPPED_DIRS,
    package_data={
        "toolkit": ["py.typed", "**/README.md"],
        "toolkit._data": [f"**/*.{ext}" for ext in ("json", "jsonl", "md", "yaml", "yml", "csv", "parquet")],
        "toolkit._kernels": ["*.c"],
    },
)
