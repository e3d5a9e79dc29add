"""Model presets, tiny model configs, workload traces and reference results; shipped as `toolkit._data`."""
