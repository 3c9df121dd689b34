"""alphagrad.hub (its format, files and card): saving, loading (local directories and the Hugging Face
cache, offline), error messages, push_to_hub's dry run, push_folder and the model card. No
test touches the network: Hub access is either offline mode or a monkeypatched function."""

import hashlib
import json
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import safetensors.numpy
from huggingface_hub import HfApi, ModelCard, ModelHubMixin
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors import safe_open

from alphagrad import hub
from alphagrad.hub import (
    CARD_NAME,
    CONFIG_NAME,
    FILE_NAMES,
    FORMAT_VERSION,
    MODEL_TYPE,
    WEIGHTS_NAME,
    AgentHubMixin,
    ModelLoadError,
    ModelNotFoundError,
    NotAnAlphagradModelError,
    UnsupportedFormatError,
    check_shapes,
    load_files,
    model_card,
    push_folder,
    save_files,
)
from alphagrad.hub.card import is_model_card
from alphagrad.hub.format import CHECKSUM_KEY, RESERVED

COMMIT = "0123456789abcdef0123456789abcdef01234567"
EVALUATION = "| function | alphagrad | reverse |\n| --- | --- | --- |\n| f | 10 | 12 |\n"
TRAINING = {"steps": 1000, "learning_rate": 0.001, "optimizer": "adam"}


class Dummy(AgentHubMixin):
    """A stand-in for alphagrad's Agent: config {"dim": d}, one dense layer."""

    def __init__(self, config, params):
        self.config = config
        self.params = params

    @staticmethod
    def expected_shapes(config):
        return {"params": {"Dense_0": {"kernel": (3, config["dim"]), "bias": (config["dim"],)}}}

    def _hub_payload(self):
        card = model_card(self.config, {"training": TRAINING, "evaluation": EVALUATION})
        return self.config, self.params, card

    @classmethod
    def _from_hub_payload(cls, config, params):
        check_shapes(cls.expected_shapes(config), params)
        return cls(config, params)


def make_dummy(dim=4):
    rng = np.random.default_rng(0)
    params = {"params": {"Dense_0": {"kernel": rng.standard_normal((3, dim)).astype(np.float32),
                                     "bias": rng.standard_normal(dim).astype(np.float32)}}}
    return Dummy({"dim": dim}, params)


def assert_same(agent, loaded):
    assert loaded.config == agent.config
    want, got = agent.params["params"]["Dense_0"], loaded.params["params"]["Dense_0"]
    assert set(got) == {"kernel", "bias"}
    for name in want:
        assert got[name].dtype == np.float32
        np.testing.assert_array_equal(got[name], want[name])


def file_bytes(directory):
    return {p.name: p.read_bytes() for p in Path(directory).iterdir()}


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache that huggingface_hub uses by default."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access")
    for name in ("create_repo", "create_branch", "upload_folder", "create_commit", "upload_file"):
        monkeypatch.setattr(HfApi, name, refuse)


def put_in_cache(cache, repo_id, source_dir, commit=COMMIT, ref="main"):
    """The cache layout hf_hub_download reads: refs/<ref> holds the commit, snapshots/<commit>/ the files."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in file_bytes(source_dir).items():
        (snapshot / name).write_bytes(data)
    return snapshot


# ------------------------------------------------------------------------ save and load


def test_save_pretrained_round_trip(tmp_path):
    agent = make_dummy()
    assert agent._hub_mixin_config is None  # ModelHubMixin captured no __init__ arguments
    target = tmp_path / "model"
    assert agent.save_pretrained(target) is None
    assert sorted(os.listdir(target)) == sorted(FILE_NAMES)
    assert_same(agent, Dummy.from_pretrained(target))
    assert_same(agent, Dummy.from_pretrained(str(target)))

    config = json.loads((target / CONFIG_NAME).read_text())
    assert config == {"dim": 4, "model_type": MODEL_TYPE, "format_version": FORMAT_VERSION,
                      CHECKSUM_KEY: hashlib.sha256((target / WEIGHTS_NAME).read_bytes()).hexdigest()}
    assert (target / CONFIG_NAME).read_text() == json.dumps(config, sort_keys=True, indent=2) + "\n"
    assert (target / CARD_NAME).read_text() == agent._hub_payload()[2]

    flat = safetensors.numpy.load_file(target / WEIGHTS_NAME)
    assert set(flat) == {"params/Dense_0/kernel", "params/Dense_0/bias"}
    np.testing.assert_array_equal(flat["params/Dense_0/kernel"], agent.params["params"]["Dense_0"]["kernel"])
    with safe_open(target / WEIGHTS_NAME, "np") as f:
        assert f.metadata() == {"format": "np", "model_type": MODEL_TYPE, "format_version": str(FORMAT_VERSION)}


def test_save_files_is_deterministic_and_atomic(tmp_path, monkeypatch):
    agent = make_dummy()
    agent.save_pretrained(tmp_path / "a")
    first = file_bytes(tmp_path / "a")
    for _ in range(5):  # safetensors' own metadata order varies from call to call; ours does not
        agent.save_pretrained(tmp_path / "b")
        assert file_bytes(tmp_path / "b") == first

    def crash(fd):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        save_files(tmp_path / "b", {"dim": 5}, make_dummy(5).params, "card")
    assert file_bytes(tmp_path / "b") == first  # old files intact, no temporary left behind


def test_save_files_rejects_bad_input(tmp_path):
    params = make_dummy().params
    with pytest.raises(ValueError, match="reserved"):
        save_files(tmp_path, {"model_type": "bert"}, params, "card")
    with pytest.raises(ValueError, match="JSON-serializable"):
        save_files(tmp_path, {"dim": object()}, params, "card")
    with pytest.raises(ValueError, match="without '/'"):
        save_files(tmp_path, {}, {"a/b": np.zeros(2)}, "card")
    with pytest.raises(ValueError, match="weights_sha256.*reserved: saving records the checksum"):
        save_files(tmp_path, {CHECKSUM_KEY: "0" * 64}, params, "card")
    assert os.listdir(tmp_path) == []
    assert save_files(tmp_path / "x", {"model_type": MODEL_TYPE}, params, "card") == list(FILE_NAMES)


def test_load_from_hf_cache_offline(tmp_path, hf_cache, offline):
    agent = make_dummy()
    agent.save_pretrained(tmp_path / "saved")
    put_in_cache(hf_cache, "org/name", tmp_path / "saved")
    assert_same(agent, Dummy.from_pretrained("org/name"))
    assert_same(agent, Dummy.from_pretrained("org/name", revision="main"))
    assert_same(agent, Dummy.from_pretrained("org/name", revision=COMMIT))
    config, _ = load_files("org/name", local_files_only=True)
    assert config == {"dim": 4}

    other = tmp_path / "other-cache"  # cache_dir= instead of HF_HUB_CACHE
    other.mkdir()
    put_in_cache(other, "org/name2", tmp_path / "saved")
    assert_same(agent, Dummy.from_pretrained("org/name2", cache_dir=other))


def test_offline_and_not_cached(hf_cache, offline):
    with pytest.raises(ModelNotFoundError, match="offline") as info:
        Dummy.from_pretrained("org/absent")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ValueError)
    message = str(info.value)
    assert "HF_HUB_OFFLINE" in message and "not in the local Hugging Face cache" in message
    assert "local model directory" in message
    with pytest.raises(ModelNotFoundError, match="offline"):
        Dummy.from_pretrained("org/absent", revision=COMMIT)
    with pytest.raises(ValueError, match="force_download"):
        Dummy.from_pretrained("org/absent", force_download=True)


def test_local_files_only_and_not_cached(hf_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ModelNotFoundError, match="local_files_only=True"):
        load_files("org/absent", local_files_only=True)


@pytest.mark.parametrize("error, expected", [
    (RepositoryNotFoundError, ["not found on the Hugging Face Hub", "hf auth login", "repo id"]),
    (RevisionNotFoundError, ["revision 'v9' was not found", "branch, tag or commit"]),
    (RemoteEntryNotFoundError, ["no config.json", "alphagrad.from_pretrained()"]),
    (LocalEntryNotFoundError, ["could not be reached", "not in the local cache", "network"]),
])
def test_hub_errors_are_explained(monkeypatch, hf_cache, error, expected):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    response = SimpleNamespace(headers={}, request=None, status_code=404)

    def fake_download(**kwargs):
        if error is LocalEntryNotFoundError:
            raise error("connection error")
        raise error("404 Client Error", response=response)
    monkeypatch.setattr(hub.files, "hf_hub_download", fake_download)
    with pytest.raises(ModelLoadError) as info:
        Dummy.from_pretrained("org/name", revision="v9")
    for text in expected:
        assert text in str(info.value)
    assert isinstance(info.value.__cause__, error)


def test_not_an_alphagrad_model(tmp_path):
    good = tmp_path / "good"
    make_dummy().save_pretrained(good)
    config = json.loads((good / CONFIG_NAME).read_text())

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotAnAlphagradModelError, match="has no config.json") as info:
        Dummy.from_pretrained(empty)
    assert "alphagrad.from_pretrained()` without an argument" in str(info.value)

    (empty / CONFIG_NAME).write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(NotAnAlphagradModelError, match="model_type 'bert', expected 'alphagrad-policy-value'"):
        Dummy.from_pretrained(empty)

    (empty / CONFIG_NAME).write_text(json.dumps({**config, "format_version": 999}))
    with pytest.raises(UnsupportedFormatError, match="format version 999") as info:
        Dummy.from_pretrained(empty)
    assert "pip install -U alphagrad" in str(info.value)

    (empty / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(NotAnAlphagradModelError, match="no model.safetensors"):
        Dummy.from_pretrained(empty)

    (empty / WEIGHTS_NAME).write_bytes((good / WEIGHTS_NAME).read_bytes()[:40])
    with pytest.raises(NotAnAlphagradModelError, match="damaged or truncated"):
        Dummy.from_pretrained(empty)

    with pytest.raises(ValueError, match="local directory"):
        Dummy.from_pretrained(good, revision="main")


@pytest.mark.parametrize("path", ["./missing_dir", "a/b/c", "/no/such/dir"])
def test_missing_directory(path, hf_cache, offline):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        Dummy.from_pretrained(path)


def test_mismatched_weight_shapes(tmp_path):
    target = tmp_path / "model"
    make_dummy().save_pretrained(target)
    config = json.loads((target / CONFIG_NAME).read_text())
    (target / CONFIG_NAME).write_text(json.dumps({**config, "dim": 5}))
    with pytest.raises(ValueError, match="do not match the config") as info:
        Dummy.from_pretrained(target)
    assert "params/Dense_0/kernel expected (3, 5), got (3, 4)" in str(info.value)


def test_check_shapes_lists_differences():
    check_shapes({"a": (2,), "b": {"c": (1, 2)}}, {"a": np.zeros(2), "b": {"c": np.zeros((1, 2))}})
    expected = {f"w{i}": (1,) for i in range(8)}
    with pytest.raises(ValueError) as info:
        check_shapes(expected, {"w0": np.zeros(2), "extra": np.zeros(1)})
    message = str(info.value)
    assert "missing (7): w1, w2, w3, w4, w5 ... and 2 more" in message
    assert "unexpected (1): extra" in message
    assert "shape mismatch (1): w0 expected (1,), got (2,)" in message


# ----------------------------------------------------------------------------- push_to_hub


def test_push_to_hub_dry_run(tmp_path, no_network):
    agent = make_dummy()
    agent.save_pretrained(tmp_path / "saved")
    target = tmp_path / "dry"
    assert agent.push_to_hub("org/name", dry_run=target, private=True, revision="dev") == str(target)
    assert file_bytes(target) == file_bytes(tmp_path / "saved")
    assert agent.push_to_hub("org/name", dry_run=str(target)) == str(target)  # again: overwrites

    temporary = Path(agent.push_to_hub("org/name", dry_run=True))
    assert file_bytes(temporary) == file_bytes(tmp_path / "saved")

    agent.push_to_hub("org/name", dry_run=tmp_path / "filtered", ignore_patterns=["*.md"])
    assert sorted(os.listdir(tmp_path / "filtered")) == [CONFIG_NAME, WEIGHTS_NAME]

    (target / "stale.bin").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="stale.bin"):
        agent.push_to_hub("org/name", dry_run=target)
    with pytest.raises(ValueError, match="Repo id"):
        agent.push_to_hub("a/b/c", dry_run=True)


def test_push_to_hub_uploads_the_dry_run_folder(tmp_path, monkeypatch):
    agent = make_dummy()
    dry = agent.push_to_hub("org/name", dry_run=tmp_path / "dry")
    calls = {}

    def create_repo(self, repo_id, **kwargs):
        calls["create_repo"] = (repo_id, kwargs)
        return SimpleNamespace(repo_id=repo_id)

    def create_branch(self, repo_id, **kwargs):
        calls["create_branch"] = (repo_id, kwargs)

    def upload_folder(self, **kwargs):
        calls["upload_folder"] = kwargs
        calls["uploaded"] = file_bytes(kwargs["folder_path"])
        return "https://huggingface.co/org/name/commit/abc"
    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_branch", create_branch)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)

    url = agent.push_to_hub("org/name", private=True, revision="dev")
    assert url == "https://huggingface.co/org/name/commit/abc"
    assert calls["uploaded"] == file_bytes(dry)
    assert calls["create_repo"] == ("org/name", {"private": True, "exist_ok": True})
    assert calls["create_branch"] == ("org/name", {"branch": "dev", "exist_ok": True})
    assert calls["upload_folder"]["revision"] == "dev"
    assert calls["upload_folder"]["repo_type"] == "model"
    with pytest.raises(ValueError, match="config= is not supported"):
        agent.push_to_hub("org/name", config={"dim": 4})


def test_mixin_is_a_model_hub_mixin():
    assert isinstance(make_dummy(), ModelHubMixin)
    card = make_dummy().generate_model_card()
    assert card.data.library_name == "alphagrad"


# ------------------------------------------------------------------------------ model card


def test_model_card():
    text = model_card({"dim": 4}, {"training": TRAINING, "evaluation": EVALUATION, "repo_id": "org/name"})
    assert text == model_card({"dim": 4}, {"evaluation": EVALUATION, "training": dict(reversed(TRAINING.items())),
                                           "repo_id": "org/name"})
    assert text.startswith("---\nlibrary_name: alphagrad\n")
    data = ModelCard(text).data
    assert data.library_name == "alphagrad" and data.license == "apache-2.0"
    assert data.tags == ["jax", "flax", "automatic-differentiation", "jacobian", "vertex-elimination", "alphazero"]
    assert "pipeline_tag" not in text
    assert "| Key | Value |\n| --- | --- |\n| learning_rate | 0.001 |\n| optimizer | adam |\n| steps | 1000 |" in text
    assert "## Evaluation\n\n" + EVALUATION in text
    assert 'agent = alphagrad.from_pretrained("org/name")' in text
    assert "alphagrad.jacobian(f, order=result)(*args)" in text
    assert '"model_type": "alphagrad-policy-value"' in text

    bare = model_card({"dim": 4}, {})
    assert "No evaluation recorded." in bare and "agent = alphagrad.from_pretrained()\n" in bare
    with pytest.raises(ValueError, match="unknown info keys"):
        model_card({"dim": 4}, {"evaluaton": EVALUATION})
    with pytest.raises(ValueError, match="flat"):
        model_card({"dim": 4}, {"training": {"optimizer": {"lr": 1}}})


def test_is_model_card():
    card = model_card({"dim": 4}, {"training": TRAINING})
    assert is_model_card(card)
    assert is_model_card(card.replace("No evaluation recorded.", "| task | cost |\n| --- | --- |"))  # edited
    assert not is_model_card("# My project\n\nlibrary_name: alphagrad\n")
    assert not is_model_card("---\nlibrary_name: transformers\n---\n# alphagrad policy-value network\n")
    assert not is_model_card("---\nlibrary_name: alphagrad\n---\n# Something else\n")
    assert not is_model_card(card.replace("\n---\n", "\n", 1))  # no end to the front matter


# -------------------------------------------------------------- what saving may replace


def test_save_never_replaces_a_users_readme(tmp_path):
    agent = make_dummy()
    target = tmp_path / "project"
    target.mkdir()
    (target / "README.md").write_text("# My project\n\nNotes I care about.\n")
    (target / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"README.md \(not an alphagrad model card\).*overwrite=True"):
        agent.save_pretrained(target)
    assert sorted(os.listdir(target)) == ["README.md", "notes.txt"]  # nothing written
    assert (target / "README.md").read_text() == "# My project\n\nNotes I care about.\n"

    agent.save_pretrained(target, overwrite=True)
    assert (target / "README.md").read_text() == agent._hub_payload()[2]
    assert (target / "notes.txt").read_text() == "mine"  # other files are left alone
    assert_same(agent, Dummy.from_pretrained(target))

    # a model alphagrad saved before (its card possibly edited) is replaced without asking
    (target / "README.md").write_text(agent._hub_payload()[2] + "\nMy own note.\n")
    make_dummy(5).save_pretrained(target)
    assert Dummy.from_pretrained(target).config == {"dim": 5}


@pytest.mark.parametrize("name, content, why", [
    (CONFIG_NAME, json.dumps({"model_type": "bert", "hidden_size": 8}), "model_type is not"),
    (CONFIG_NAME, "not json", "unreadable"),
    (WEIGHTS_NAME, None, "not alphagrad weights"),
])
def test_save_never_replaces_another_models_files(tmp_path, name, content, why):
    target = tmp_path / "other"
    target.mkdir()
    if content is None:
        (target / name).write_bytes(safetensors.numpy.save({"w": np.ones(2, np.float32)}))
    else:
        (target / name).write_text(content)
    before = file_bytes(target)
    with pytest.raises(FileExistsError, match=why):
        save_files(target, {"dim": 4}, make_dummy().params, "card")
    assert file_bytes(target) == before
    assert save_files(target, {"dim": 4}, make_dummy().params, "card", overwrite=True) == list(FILE_NAMES)


def test_save_into_a_file_or_with_non_finite_params(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        make_dummy().save_pretrained(tmp_path / "f")
    params = make_dummy().params
    params["params"]["Dense_0"]["bias"][1] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinite values \(params/Dense_0/bias: 1 of 4\)"):
        save_files(tmp_path / "nan", {"dim": 4}, params, "card")
    assert not (tmp_path / "nan").exists()


# ------------------------------------------------------------- what loading accepts


def _write_weights(directory, tensors, keep_checksum=False):
    """Replace a saved model's weights with `tensors` (flat names), keeping alphagrad's metadata,
    as another tool would: config.json then records no checksum (unless `keep_checksum`)."""
    meta = {"format": "np", "model_type": MODEL_TYPE, "format_version": str(FORMAT_VERSION)}
    (directory / WEIGHTS_NAME).write_bytes(safetensors.numpy.save(tensors, metadata=meta))
    if not keep_checksum:
        config = json.loads((directory / CONFIG_NAME).read_text())
        config.pop(CHECKSUM_KEY, None)
        (directory / CONFIG_NAME).write_text(json.dumps(config))


# ------------------------------------------------------------------ the weights' checksum


@pytest.mark.parametrize("fill", ["zeros", "random"])
def test_a_damaged_weights_file_is_refused_naming_the_file(tmp_path, fill):
    target = tmp_path / "model"
    make_dummy(1024).save_pretrained(target)  # 16 kB of weights
    weights = target / WEIGHTS_NAME
    data = bytearray(weights.read_bytes())
    block = bytes(4096) if fill == "zeros" else np.random.default_rng(1).bytes(4096)
    data[-8192:-4096] = block  # 4 kB of the tensor data overwritten
    weights.write_bytes(bytes(data))
    with pytest.raises(NotAnAlphagradModelError) as info:
        Dummy.from_pretrained(target)
    message = str(info.value)
    if fill == "zeros":  # finite: only the checksum tells
        assert f"the weights file {weights} does not match the checksum in config.json" in message
        assert "damaged" in message and "Save or download the model again" in message
    else:  # random bytes (NaN or infinity among them, found first here): either message names the file
        assert str(target) in message and WEIGHTS_NAME in message and "damaged" in message


def test_rescaled_weights_are_refused(tmp_path):
    agent = make_dummy()
    agent.save_pretrained(tmp_path)
    flat = safetensors.numpy.load_file(tmp_path / WEIGHTS_NAME)
    _write_weights(tmp_path, {k: v * np.float32(1e30) for k, v in flat.items()}, keep_checksum=True)
    with pytest.raises(NotAnAlphagradModelError, match="does not match the checksum in config.json") as info:
        Dummy.from_pretrained(tmp_path)
    assert str(tmp_path / WEIGHTS_NAME) in str(info.value)
    agent.save_pretrained(tmp_path)  # saving again records the checksum of what it writes
    assert_same(agent, Dummy.from_pretrained(tmp_path))


def test_a_damaged_file_in_the_hf_cache_is_refused_naming_it(tmp_path, hf_cache, offline):
    make_dummy().save_pretrained(tmp_path / "saved")
    snapshot = put_in_cache(hf_cache, "org/name", tmp_path / "saved")
    weights = snapshot / WEIGHTS_NAME
    flat = safetensors.numpy.load_file(weights)
    weights.write_bytes(safetensors.numpy.save({k: -v for k, v in flat.items()}, metadata={"format": "np"}))
    with pytest.raises(NotAnAlphagradModelError, match="does not match the checksum") as info:
        Dummy.from_pretrained("org/name")
    assert str(weights) in str(info.value) and "force_download=True" in str(info.value)


def test_a_model_saved_without_a_checksum_loads(tmp_path):
    agent = make_dummy()
    agent.save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_NAME).read_text())
    del config[CHECKSUM_KEY]  # as saved before checksums were recorded
    (tmp_path / CONFIG_NAME).write_text(json.dumps(config))
    assert_same(agent, Dummy.from_pretrained(tmp_path))
    (tmp_path / CONFIG_NAME).write_text(json.dumps({**config, CHECKSUM_KEY: "abc"}))
    with pytest.raises(NotAnAlphagradModelError, match="invalid weights_sha256 'abc'.*damaged"):
        Dummy.from_pretrained(tmp_path)


def _leaves(tree, prefix=""):
    """A nested dict of arrays as {"a/b": array}."""
    out = {}
    for key, node in tree.items():
        out.update(_leaves(node, f"{prefix}{key}/") if isinstance(node, dict) else {prefix + key: node})
    return out


def test_the_bundled_model_records_its_weights_checksum_and_loads_without_it(tmp_path):
    import shutil

    bundled = Path(hub.__file__).parents[1] / "pretrained"  # alphagrad/pretrained
    config = json.loads((bundled / CONFIG_NAME).read_text())
    assert config[CHECKSUM_KEY] == hashlib.sha256((bundled / WEIGHTS_NAME).read_bytes()).hexdigest()
    assert (bundled / CONFIG_NAME).read_text() == hub.config_text(
        {k: v for k, v in config.items() if k not in (*RESERVED, CHECKSUM_KEY)}, config[CHECKSUM_KEY])
    settings, params = load_files(bundled)
    assert CHECKSUM_KEY not in settings
    old = tmp_path / "old"
    shutil.copytree(bundled, old)
    del config[CHECKSUM_KEY]  # the bundled model as shipped before checksums were recorded
    (old / CONFIG_NAME).write_text(json.dumps(config))
    old_settings, old_params = load_files(old)
    assert old_settings == settings
    want, got = _leaves(params), _leaves(old_params)
    assert got.keys() == want.keys() and len(want) == 80
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused(tmp_path, value):
    agent = make_dummy()
    agent.save_pretrained(tmp_path)
    kernel = agent.params["params"]["Dense_0"]["kernel"].copy()
    kernel[2, 3] = value
    _write_weights(tmp_path, {"params/Dense_0/kernel": kernel, "params/Dense_0/bias": np.zeros(4, np.float32)})
    with pytest.raises(NotAnAlphagradModelError, match=r"NaN or infinite weights \(params/Dense_0/kernel: 1 of 12\)"):
        Dummy.from_pretrained(tmp_path)


def test_float16_weights_are_upcast_with_a_warning_and_other_dtypes_refused(tmp_path):
    agent = make_dummy()
    agent.save_pretrained(tmp_path)
    half = {k: v.astype(np.float16) for k, v in agent.params["params"]["Dense_0"].items()}
    _write_weights(tmp_path, {f"params/Dense_0/{k}": v for k, v in half.items()})
    with pytest.warns(UserWarning, match="2 of 2 weight tensors are float16.*upcast to float32"):
        loaded = Dummy.from_pretrained(tmp_path)
    for k, v in half.items():
        got = loaded.params["params"]["Dense_0"][k]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, v.astype(np.float32))  # exact: every float16 is a float32

    _write_weights(tmp_path, {"params/Dense_0/kernel": agent.params["params"]["Dense_0"]["kernel"].astype(np.float64),
                              "params/Dense_0/bias": np.zeros(4, np.int32)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NotAnAlphagradModelError, match="not float32.*bias: int32.*kernel: float64.*store float32"):
            Dummy.from_pretrained(tmp_path)


# ------------------------------------------------------------------------- push_folder


def test_push_folder_dry_run_and_upload(tmp_path, monkeypatch, no_network):
    agent = make_dummy()
    saved = tmp_path / "saved"
    agent.save_pretrained(saved)
    (saved / "notes.txt").write_text("not uploaded")
    out = push_folder(saved, "org/name", dry_run=tmp_path / "dry")
    assert out == str(tmp_path / "dry")
    assert file_bytes(out) == {k: v for k, v in file_bytes(saved).items() if k != "notes.txt"}
    with pytest.raises(ValueError, match="the model directory itself"):
        push_folder(saved, "org/name", dry_run=saved)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "README.md").write_text("# mine\n")
    with pytest.raises(FileExistsError, match="README.md"):
        push_folder(saved, "org/name", dry_run=tmp_path / "busy")
    assert (tmp_path / "busy" / "README.md").read_text() == "# mine\n"

    calls = {}
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: SimpleNamespace(repo_id=repo_id))

    def upload_folder(self, **kwargs):
        calls.update(kwargs, uploaded=file_bytes(kwargs["folder_path"]))
        return "https://huggingface.co/org/name/commit/abc"
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    assert push_folder(saved, "org/name", commit_message="v1") == "https://huggingface.co/org/name/commit/abc"
    assert calls["uploaded"] == file_bytes(out) and calls["commit_message"] == "v1"


def test_push_folder_refuses_what_is_not_a_complete_model(tmp_path, no_network):
    saved = tmp_path / "saved"
    make_dummy().save_pretrained(saved)
    (saved / CARD_NAME).write_text("# my notes\n")
    with pytest.raises(NotAnAlphagradModelError, match="not an alphagrad model card"):
        push_folder(saved, "org/name", dry_run=True)
    (saved / CARD_NAME).unlink()
    with pytest.raises(NotAnAlphagradModelError, match="has no README.md"):
        push_folder(saved, "org/name", dry_run=True)
    (saved / CONFIG_NAME).unlink()
    with pytest.raises(NotAnAlphagradModelError, match="has no config.json"):
        push_folder(saved, "org/name", dry_run=True)
    with pytest.raises(ModelNotFoundError, match="not a directory"):
        push_folder(tmp_path / "missing", "org/name", dry_run=True)
    assert not list(tmp_path.glob("**/alphagrad-push-*"))
