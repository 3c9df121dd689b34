"""The Hugging Face model card (README.md) of a saved alphagrad policy-value network.

`model_card(config, info)` is a pure function of its arguments: the same config and info
give the same text, byte for byte, so re-saving an unchanged model does not change its card.
`is_model_card(text)` tells whether a README.md is such a card (so that saving a model
never overwrites a README.md that alphagrad did not write). The card shows config.json as
:mod:`alphagrad.hub.format` writes it, less the weights' checksum (the card is written
before the weights are serialized).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from alphagrad.hub.format import config_text

TAGS = ("jax", "flax", "automatic-differentiation", "jacobian", "vertex-elimination", "alphazero")
INFO_KEYS = ("repo_id", "training", "evaluation")
TITLE = "# alphagrad policy-value network"


def _cell(value) -> str:
    """One table cell: strings as they are, anything else as JSON (true, 0.001, [2, 4])."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, allow_nan=True)
        except TypeError:  # numpy scalars and other non-JSON values: their str()
            text = str(value)
    # A cell is one line, and a bare "|" would end it early.
    return " ".join(text.split("\n")).replace("|", "\\|")


def _training_section(training) -> list[str]:
    if training is None or (isinstance(training, Mapping) and not training):
        return ["No training information recorded."]
    if not isinstance(training, Mapping):
        raise TypeError(f"info['training'] must be a flat dict, not {type(training).__name__}")
    nested = sorted(str(k) for k, v in training.items() if isinstance(v, Mapping))
    if nested:
        raise ValueError(f"info['training'] must be a flat dict; these values are dicts: {nested}")
    rows = ["| Key | Value |", "| --- | --- |"]
    for key in sorted(training, key=str):
        rows.append(f"| {_cell(str(key))} | {_cell(training[key])} |")
    return rows


def _evaluation_section(evaluation) -> list[str]:
    if evaluation is None or (isinstance(evaluation, str) and not evaluation.strip()):
        return ["No evaluation recorded."]
    if not isinstance(evaluation, str):
        raise TypeError(f"info['evaluation'] must be a markdown string, not {type(evaluation).__name__}")
    return [evaluation.rstrip()]


def model_card(config: dict, info: dict | None = None) -> str:
    """The README.md of a saved model.

    config: the model config (as passed to `save_files`; the card shows it exactly as
        config.json holds it, with model_type and format_version, less weights_sha256).
    info: optional keys, any other key is an error (it is most likely a typo):
        "repo_id": the Hub repo the card is for, used in the usage example
            (absent: the example loads the bundled model, `alphagrad.from_pretrained()`);
        "training": a flat dict, rendered as a key | value table;
        "evaluation": a markdown string, inserted verbatim.
    """
    info = {} if info is None else info
    if not isinstance(info, Mapping):
        raise TypeError(f"info must be a dict, not {type(info).__name__}")
    unknown = sorted(str(k) for k in info if k not in INFO_KEYS)
    if unknown:
        raise ValueError(f"unknown info keys {unknown}; model_card understands {list(INFO_KEYS)}")
    repo_id = info.get("repo_id")
    load_arg = json.dumps(repo_id) if repo_id else ""

    lines = [
        "---",
        "library_name: alphagrad",
        "license: apache-2.0",
        "tags:",
        *(f"- {tag}" for tag in TAGS),
        "---",
        "",
        TITLE,
        "",
        ("The pretrained network of **alphagrad**, a library that "
         "computes Jacobians of JAX functions by cross-country vertex elimination. It is one "
         "transformer policy-value network for all graphs: an encoder attends along the edges of a "
         "function's computational graph once, and a light per-vertex decoder scores, at every step, "
         "which intermediate vertex to eliminate next (its policy) and estimates the cost still to "
         "come (its value) from what the state says of each vertex (its elimination cost, degrees, "
         "how eliminating it changes its neighbours' costs and how eliminating them changes its own), "
         "re-scoring only the vertices within two hops of each move. It is trained on "
         "annealed orders of many generated graphs, with soft targets: every move that keeps the "
         "completed cost minimal, and every move's regret. Its orders, and annealing started from them, give "
         "vertex-elimination orders for Jacobian accumulation that can take fewer multiplications "
         "than forward or reverse mode."),
        "",
        ("Files: `config.json` (architecture and format version), `model.safetensors` "
         "(float32 weights, loaded without unpickling anything) and this card."),
        "",
        "## How to use",
        "",
        "```python",
        "import alphagrad",
        "",
        f"agent = alphagrad.from_pretrained({load_arg})",
        "result = agent.order(f, *args)  # f: a JAX function, args: example inputs",
        "jac = alphagrad.jacobian(f, order=result)(*args)",
        "```",
        "",
        "## Training",
        "",
        *_training_section(info.get("training")),
        "",
        "## Evaluation",
        "",
        *_evaluation_section(info.get("evaluation")),
        "",
        "## Configuration",
        "",
        "```json",
        config_text(config).rstrip("\n"),
        "```",
    ]
    return "\n".join(lines) + "\n"


def is_model_card(text: str) -> bool:
    """Whether ``text`` is a model card written by :func:`model_card` (possibly edited
    since, e.g. with evaluation results): YAML front matter declaring
    ``library_name: alphagrad`` and the card's title line."""
    if not isinstance(text, str) or not text.startswith("---\n"):
        return False
    end = text.find("\n---\n", 3)
    if end < 0:
        return False
    front, body = text[4:end].splitlines(), text[end + 5:].splitlines()
    return "library_name: alphagrad" in front and TITLE in body
