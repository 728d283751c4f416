"""The JSON Schema files in `schemas/`, generated from the models in `schema`."""

from __future__ import annotations

import json

SCHEMA_MODELS = {"definition": "Definition", "workload": "Workload", "trace": "Trace", "solution": "SolutionSpec"}
"""file stem -> model class in kda_trace.schema."""


def schema_texts() -> dict:
    """file name -> JSON Schema text, generated from the models."""
    from . import schema as models

    return {f"{stem}.schema.json": json.dumps(getattr(models, model).model_json_schema(), indent=2) + "\n"
            for stem, model in SCHEMA_MODELS.items()}
