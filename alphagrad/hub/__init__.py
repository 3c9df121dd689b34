"""Model-hub I/O for alphagrad's pretrained policy-value network.

* :mod:`alphagrad.hub.format`: what a saved model holds (config.json's schema, limits,
  format version, the weights' checksum, migrations of older models, shape checks) and the
  loading errors;
* :mod:`alphagrad.hub.files`: saving, loading and pushing (safetensors, config.json, the
  Hugging Face Hub, offline), and the ``save_pretrained`` / ``from_pretrained`` /
  ``push_to_hub`` mixin of :class:`alphagrad.agent.Agent`;
* :mod:`alphagrad.hub.card`: the model card (README.md).

    save_files(directory, config, params, card, overwrite=False) -> written file names
    load_files(model_id_or_path, revision=None, ...)             -> (config, params)
    check_shapes(expected, params)                                raises if they differ
    model_card(config, info)                                      -> README.md text
    push_folder(directory, repo_id, ..., dry_run=False)           uploads a saved model directory
"""

from alphagrad.hub.card import model_card
from alphagrad.hub.files import AgentHubMixin, load_files, push_folder, save_files
from alphagrad.hub.format import (CARD_NAME, CONFIG_NAME, FILE_NAMES, FORMAT_VERSION, MODEL_TYPE, WEIGHTS_NAME,
                                  ModelLoadError, ModelNotFoundError, NotAnAlphagradModelError, UnsupportedFormatError,
                                  check_shapes, config_text)

__all__ = [
    "CARD_NAME",
    "CONFIG_NAME",
    "FILE_NAMES",
    "FORMAT_VERSION",
    "MODEL_TYPE",
    "WEIGHTS_NAME",
    "AgentHubMixin",
    "ModelLoadError",
    "ModelNotFoundError",
    "NotAnAlphagradModelError",
    "UnsupportedFormatError",
    "check_shapes",
    "config_text",
    "load_files",
    "model_card",
    "push_folder",
    "save_files",
]
