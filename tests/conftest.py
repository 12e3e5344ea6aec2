"""Shared test setup: few torch threads (2-core machine), app paths."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
# Figures are built without plotly's validation in the app (attnviz.views.spec.figure); the
# tests build them with it, so a property plotly does not know fails here.
os.environ.setdefault("ATTNVIZ_VALIDATE_FIGURES", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
