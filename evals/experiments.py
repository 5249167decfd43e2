"""An evaluation in LangSmith: the dataset uploaded, one experiment with a run and scores per item.

``python -m evals --langsmith`` computes its metrics itself; this records them:
:func:`record_experiment` creates (or reuses) the dataset, uploads the items it does not
hold yet (each item's id maps to a stable example id, so uploading again adds nothing),
then records one experiment (a project linked to the dataset) with one run per result,
linked to its example, and one feedback score per metric. Inputs and outputs are masked
like every trace (examples too). It blocks: call it from a thread in async code.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langsmith import Client, RunTree
from langsmith import utils as ls_utils
from pydantic import BaseModel, ConfigDict, Field

from copilot.errors import InvalidInput
from copilot.settings import Settings
from copilot.tracing.masking import trace_anonymizer
from copilot.tracing.runs import langsmith_client

_EXAMPLE_NAMESPACE = uuid.UUID("6f1d2c4e-9a53-4b7e-8c1f-0d2e3a4b5c6d")


class ExperimentExample(BaseModel):
    """One dataset item: what the copilot is asked and what a reviewer expects."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    """The item's own id in the repository's dataset (stable across uploads)."""
    inputs: dict[str, Any]
    reference: dict[str, Any] = Field(default_factory=dict)
    """Reference facts, records, tool calls and fields (LangSmith's reference outputs)."""
    split: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ExperimentResult(BaseModel):
    """What the copilot did on one item, and its scores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    example_id: str = Field(min_length=1)
    outputs: dict[str, Any]
    scores: dict[str, float | bool | None] = Field(default_factory=dict)
    """Metric name → score (``None``: not applicable to this item, not sent)."""
    error: str | None = None


class RecordedExperiment(BaseModel):
    """Where the experiment went."""

    dataset_id: str
    experiment_id: str
    experiment_name: str
    examples_uploaded: int
    runs: int
    url: str | None


def json_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of JSON data (the anonymizer edits in place)."""
    copied: dict[str, Any] = json.loads(json.dumps(value, default=str))
    return copied


def example_uuid(dataset_name: str, item_id: str) -> uuid.UUID:
    """The LangSmith example id of a dataset item (the same on every upload)."""
    return uuid.uuid5(_EXAMPLE_NAMESPACE, f"{dataset_name}\0{item_id}")


def _dataset(client: Client, name: str, description: str) -> Any:
    try:
        return client.read_dataset(dataset_name=name)
    except ls_utils.LangSmithNotFoundError:
        return client.create_dataset(name, description=description)


def record_experiment(
    settings: Settings,
    *,
    dataset_name: str,
    examples: Sequence[ExperimentExample],
    results: Sequence[ExperimentResult],
    experiment_name: str,
    description: str = "",
    metadata: Mapping[str, Any] | None = None,
    client: Client | None = None,
) -> RecordedExperiment:
    """Upload ``examples`` to the dataset and record ``results`` as experiment ``experiment_name``.

    ``settings`` give the endpoint and API key (``LANGSMITH_*``; tracing need not be on for
    requests, but a hosted endpoint needs a key: ``ConfigurationError`` otherwise). Every
    result must name an example; a duplicate item id or an unknown example is refused
    (``InvalidInput``) before anything is sent.
    """
    by_id = {e.id: e for e in examples}
    if len(by_id) != len(examples):
        raise InvalidInput("the dataset names an item id twice")
    unknown = sorted({r.example_id for r in results} - set(by_id))
    if unknown:
        raise InvalidInput(f"results for items not in the dataset: {', '.join(unknown[:5])}")
    own_client = client is None
    client = client or langsmith_client(settings)
    try:
        dataset = _dataset(client, dataset_name, description)
        existing = {str(e.id) for e in client.list_examples(dataset_id=dataset.id)}
        missing = [e for e in examples if str(example_uuid(dataset_name, e.id)) not in existing]
        if missing:
            # Examples are not runs: the client's anonymizer does not see them.
            mask = trace_anonymizer(settings.phone_region)
            client.create_examples(
                dataset_id=dataset.id,
                examples=[
                    {
                        "id": example_uuid(dataset_name, e.id),
                        "inputs": mask(json_copy(e.inputs)),
                        "reference_outputs": mask(json_copy(e.reference)),
                        "metadata": mask(json_copy({**e.metadata, "item_id": e.id})),
                        "split": e.split,
                    }
                    for e in missing
                ],
            )
        try:
            project = client.create_project(
                experiment_name,
                description=description or None,
                reference_dataset_id=dataset.id,
                metadata=dict(metadata or {}),
            )
        except ls_utils.LangSmithConflictError as exc:
            raise InvalidInput(f"experiment {experiment_name!r} exists already; choose a new name") from exc
        for result in results:
            example = by_id[result.example_id]
            run = RunTree(
                name="copilot.eval",
                run_type="chain",
                inputs=example.inputs,
                project_name=experiment_name,
                reference_example_id=example_uuid(dataset_name, example.id),
                tags=["copilot", "eval"],
                extra={"metadata": {"item_id": example.id, "split": example.split}},
                ls_client=client,
            )
            run.post()
            run.end(outputs=result.outputs, error=result.error)
            run.patch()
            for metric, score in result.scores.items():
                if score is not None:
                    client.create_feedback(
                        run.id, metric, score=float(score), trace_id=run.id, session_id=project.id
                    )
        client.update_project(project.id, end_time=dt.datetime.now(dt.UTC))
        client.flush()
        return RecordedExperiment(
            dataset_id=str(dataset.id),
            experiment_id=str(project.id),
            experiment_name=experiment_name,
            examples_uploaded=len(missing),
            runs=len(results),
            url=project.url,
        )
    finally:
        if own_client:
            client.close()
