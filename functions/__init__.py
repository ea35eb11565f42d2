"""The Knative functions: one small Flask app per module, each a thin CloudEvent adapter over
the shared library (``kdesched``). Installed as ``kdesched.functions``."""
