"""The GPU performance model: how long a step would take (step_time.py, a roofline with GPU profiles from
data/gpus/), the model shapes it needs (model_shape.py) and the dry engine's virtual clock (clock.py). Pure Python.
"""
