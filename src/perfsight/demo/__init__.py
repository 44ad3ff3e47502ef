"""The bundled demo: a small CNN trained on synthetic data (train.py) and `perfsight demo`'s driver."""
