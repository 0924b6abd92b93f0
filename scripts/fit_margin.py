"""Measure the safety margin's bounds on the shipped calibration data and print planner/data/margin.json.

Run: python scripts/fit_margin.py > planner/data/margin.json   (after any change to the memory model
or the calibration data; tests/core/test_margin.py fails while the shipped file is stale)
"""

from __future__ import annotations

import json

from planner.calibration.dataset import dataset_records
from planner.calibration.margin_fit import fit_margin
from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model

if __name__ == "__main__":
    model = fit_margin(dataset_records(), lookup_model=lookup_model, lookup_gpu=lookup_gpu)
    print(json.dumps(model.model_dump(mode="json"), indent=1))
