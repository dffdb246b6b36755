"""The removed 4.x classes the layer serves with behaviour of their own: ``AutoModelWithLMHead``
chooses the class 4.30 chose for the model type, and ``MODEL_WITH_LM_HEAD_MAPPING`` maps to it; ``BloomTokenizerFast`` is what 5.x's
AutoTokenizer loads for a checkpoint that names it."""

from __future__ import annotations

import json
import types
import warnings
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
if hasattr(transformers, "AutoModelWithLMHead"):
    pytest.skip("this release still has the 4.x classes: nothing to serve", allow_module_level=True)

import torch  # noqa: E402

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.transformers import _legacy_imports  # noqa: E402
from shardcompat.transformers.legacy_table import LM_HEAD_MODELS  # noqa: E402


def _tiny(kind: str) -> transformers.PretrainedConfig:
    if kind == "gpt2":
        return transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16)
    if kind == "bert":
        return transformers.BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=16)
    return transformers.T5Config(vocab_size=16, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2)


@pytest.mark.parametrize("kind", ["gpt2", "bert", "t5"])
def test_auto_model_with_lm_head_loads_the_class_4_30_chose(kind: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_legacy_imports, "_warned", set())  # each name warns once per process
    config = _tiny(kind)
    expected = getattr(transformers, LM_HEAD_MODELS[config.model_type])
    torch.manual_seed(0)
    expected(config).save_pretrained(tmp_path)
    reference = expected.from_pretrained(tmp_path).state_dict()
    with sct.dropins(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from transformers import AutoModelWithLMHead  # type: ignore[attr-defined]

        model = AutoModelWithLMHead.from_pretrained(tmp_path, cache_dir=str(tmp_path / "cache"))
        fresh = AutoModelWithLMHead.from_config(config)
    assert type(model) is expected and type(fresh) is expected
    assert all(torch.equal(reference[k], v) for k, v in model.state_dict().items())
    assert any("AutoModelWithLMHead" in str(w.message) and "AutoModelForCausalLM" in str(w.message)
               for w in caught if issubclass(w.category, FutureWarning))


def test_model_with_lm_head_mapping_maps_each_config_to_the_class_4_30_chose() -> None:
    """run_language_modeling.py listed its model types from this mapping's keys."""
    with sct.dropins():
        from transformers import MODEL_WITH_LM_HEAD_MAPPING  # type: ignore[attr-defined]
    configs = list(MODEL_WITH_LM_HEAD_MAPPING.keys())
    types_ = [c.model_type for c in configs]
    assert {"bert", "gpt2", "t5", "bart", "roberta"} <= set(types_) and len(configs) == len(MODEL_WITH_LM_HEAD_MAPPING)
    assert set(types_) <= set(LM_HEAD_MODELS) and "transfo-xl" not in types_  # a model 5.x removed is left out
    for kind in ("gpt2", "bert", "t5"):
        config = _tiny(kind)
        assert MODEL_WITH_LM_HEAD_MAPPING[type(config)] is getattr(transformers, LM_HEAD_MODELS[kind])
    with pytest.raises(KeyError):
        MODEL_WITH_LM_HEAD_MAPPING[transformers.LlamaConfig]  # no LM class in 4.30's table


def test_auto_model_with_lm_head_names_what_it_cannot_load() -> None:
    with sct.dropins():
        from transformers import AutoModelWithLMHead  # type: ignore[attr-defined]

        with pytest.raises(ValueError, match=r"model type 'llama'.*AutoModelForCausalLM"):
            AutoModelWithLMHead.model_class(types.SimpleNamespace(model_type="llama"))  # after 4.30's table
        with pytest.raises(ImportError, match="TransfoXLLMHeadModel"):  # in 4.30's table, removed since
            AutoModelWithLMHead.model_class(types.SimpleNamespace(model_type="transfo-xl"))
        with pytest.raises(OSError, match="from_pretrained"):
            AutoModelWithLMHead()


def test_bloom_tokenizer_fast_loads_a_4_30_bloom_checkpoint_as_auto_tokenizer_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tokenizers

    monkeypatch.setattr(_legacy_imports, "_warned", set())
    specials = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=80, special_tokens=list(specials.values()),
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["hello world, this is bloom", "a tiny corpus of words"] * 5, trainer)
    backend.save(str(tmp_path / "tokenizer.json"))
    # What 4.30's BloomTokenizerFast.save_pretrained wrote beside it.
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BloomTokenizerFast", **specials}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(specials))
    stock = transformers.AutoTokenizer.from_pretrained(tmp_path)
    with sct.dropins():
        with pytest.warns(FutureWarning, match="BloomTokenizerFast"):
            from transformers import BloomTokenizerFast  # type: ignore[attr-defined]
        served = BloomTokenizerFast.from_pretrained(tmp_path)
    assert type(served) is type(stock)
    texts = ["hello world", "a tiny bloom"]
    assert served(texts, padding=True)["input_ids"] == stock(texts, padding=True)["input_ids"]
    assert {k: getattr(served, k) for k in specials} == specials
    assert not hasattr(transformers, "BloomTokenizerFast")
