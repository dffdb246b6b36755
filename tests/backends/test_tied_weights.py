"""Tied weights on every backend: a head tied to its embedding (GPT-2's ``lm_head``, BERT's
masked-LM decoder) shards, trains as plain DDP does, stays tied, and comes out of
``full_state_dict`` as ``module.state_dict()`` lists it: under each name, as one tensor, so
``torch.save`` writes it once and ``save_pretrained`` drops the tied name.

Two groups of cases, each in one spawned 2-rank gloo group: the harness's tiny tied model
(``tests._parity``), and real Transformers models with their default configuration (dropout
on, tied heads; an untied BERT as the control) under every sharded option the backends
serve.  The DDP reference is hand-built; both sides seed each rank alike before training, and
``prepare()`` leaves the random streams untouched, so both draw the same dropout masks.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from shardcompat.backends import get
from tests._parity import (
    FP32_TOL,
    Case,
    Result,
    assert_matches_ddp,
    build_model,
    case_id,
    run_cases,
)

OPTIONS = {"torch-zero": "simple", "torch-fsdp1": "zero_dp_3 auto_wrap", "torch-fsdp2": "zero_dp_3 auto_wrap",
           "fairscale-sdp": "simple", "fairscale-fsdp": "zero_dp_3"}
CASES = [Case(o, b, model="tied", optimizer="adamw") for b, o in OPTIONS.items() if get(b).probe()]


@functools.cache
def _results() -> dict[Case, Result | str]:
    return run_cases(CASES, 2, timeout=280)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_tied_weight_is_one_tensor_under_each_name(case: Case) -> None:
    got = assert_matches_ddp(_results(), case, FP32_TOL)  # also: the same keys as DDP's state_dict
    model = build_model("tied")
    assert got.state.keys() == model.state_dict().keys()
    assert got.state["head.weight"] is got.state["embed.weight"], "tied weights came out as two copies"
    saved = io.BytesIO()
    torch.save(got.state, saved)
    loaded = torch.load(io.BytesIO(saved.getvalue()), weights_only=True)
    assert loaded["head.weight"].untyped_storage().data_ptr() == loaded["embed.weight"].untyped_storage().data_ptr()
    model.load_state_dict(loaded)
    assert model.head.weight is model.embed.weight and torch.equal(model.head.weight, got.state["embed.weight"])


# ------------------------------------------------------------------ real Transformers models
VOCAB, SEQ, BATCH, STEPS = 64, 8, 4, 4
# Every sharded option, each on the backends that serve it (auto_wrap with the model's own
# _no_split_modules, which for BERT and RoBERTa names the embeddings that hold the tied weight).
HF_OPTIONS = [
    ("simple", "torch-zero"),
    ("zero_dp_2 auto_wrap", "torch-fsdp2"),
    ("zero_dp_3 auto_wrap", "torch-fsdp2"),
    ("zero_dp_3", "torch-fsdp2"),
    ("zero_dp_2 auto_wrap", "torch-fsdp1"),
    ("zero_dp_3 auto_wrap", "torch-fsdp1"),
    ("simple", "fairscale-sdp"),
    ("zero_dp_3 auto_wrap", "fairscale-fsdp"),
    # the two other rules: classes named by the user, and size (small enough to make every
    # embedding and head a candidate unit of its own)
    ("zero_dp_3 wrap={units}", "torch-fsdp2"),
    ("zero_dp_3 wrap={units}", "torch-fsdp1"),
    ("zero_dp_3 wrap={units}", "fairscale-fsdp"),
    ("zero_dp_3 min_num_params=1000", "torch-fsdp2"),
    ("zero_dp_2 min_num_params=1000", "torch-fsdp1"),
    ("zero_dp_3 min_num_params=1000", "fairscale-fsdp"),
]
HF_MODELS = ["bert-mlm", "roberta-mlm", "gpt2", "t5", "bart", "bert-mlm-untied"]
# wrap= for each model: its blocks and the modules that hold one end of a tied pair each (the
# embeddings and the masked-LM head; GPT-2's trunk without its head; T5's and BART's stacks,
# whose token embedding is the shared one)
UNITS = {
    "bert-mlm": "BertEmbeddings,BertLayer,BertLMPredictionHead",
    "bert-mlm-untied": "BertEmbeddings,BertLayer,BertLMPredictionHead",
    "roberta-mlm": "RobertaEmbeddings,RobertaLayer,RobertaLMHead",
    "gpt2": "GPT2Model,GPT2Block",
    "t5": "T5Stack,T5Block",
    "bart": "BartEncoder,BartDecoder,BartEncoderLayer,BartDecoderLayer",
}


def hf_model(name: str) -> torch.nn.Module:
    """A tiny real Transformers model, its config's defaults kept (dropout on, heads tied)."""
    import transformers as t

    torch.manual_seed(0)
    small = {"vocab_size": VOCAB, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if name.startswith("bert"):
        config = t.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                              max_position_embeddings=32, tie_word_embeddings=not name.endswith("untied"), **small)
        return t.BertForMaskedLM(config)
    if name == "roberta-mlm":
        return t.RobertaForMaskedLM(t.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                    intermediate_size=37, max_position_embeddings=40, **small))
    if name == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(n_positions=16, n_embd=32, n_layer=2, n_head=2, **small))
    if name == "t5":
        return t.T5ForConditionalGeneration(t.T5Config(d_model=32, d_ff=37, d_kv=16, num_layers=2, num_heads=2,
                                                       decoder_start_token_id=0, **small))
    return t.BartForConditionalGeneration(t.BartConfig(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=32, decoder_start_token_id=2, **small))


@dataclass(frozen=True)
class HfCase:
    model: str
    options: str | None  # None: the hand-built DDP reference
    backend: str = "auto"

    @property
    def reference(self) -> HfCase:
        return HfCase(self.model, None)


@dataclass
class HfResult:
    losses: list[float]
    state: dict[str, torch.Tensor]
    tied_in_module: bool  # every tied group still one parameter in the trained module
    tied_names: list[list[str]]


def _tied(module: torch.nn.Module) -> list[list[str]]:
    by_id: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(param), []).append(name)
    return sorted(sorted(names) for names in by_id.values() if len(names) > 1)


def _train_hf(case: HfCase, rank: int) -> HfResult:
    import torch.distributed as dist

    import shardcompat

    model = hf_model(case.model)
    model.train()
    tied = _tied(model)
    optimizer = functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.01)
    if case.options is None:
        # Untied BERT leaves cls.predictions.bias out of the loss on 5.x, as a user's DDP run would need to be told
        runner: Any = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        opt = optimizer(runner.parameters())
        step, zero, module = opt.step, opt.zero_grad, model
    else:
        prepared = shardcompat.prepare(model, optimizer, case.options.format(units=UNITS[case.model]),
                                       backend=case.backend)
        runner, step, zero, module = prepared, prepared.step, prepared.zero_grad, prepared.module
    torch.manual_seed(100 + rank)  # the dropout stream: each rank its own, the same on both sides
    losses = []
    for i in range(STEPS):
        gen = torch.Generator().manual_seed(1000 * i + rank)
        # counting sequences from random starts: a causal or seq2seq head can learn them in a few steps
        start = torch.randint(0, VOCAB - 3, (BATCH, 1), generator=gen)
        tokens = (start + torch.arange(SEQ)) % (VOCAB - 3) + 3
        loss = runner(input_ids=tokens, labels=tokens).loss
        (prepared.backward(loss) if case.options is not None else loss.backward())
        step()
        zero()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / dist.get_world_size())
    if case.options is None:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    else:
        state = prepared.full_state_dict()
    return HfResult(losses, state if rank == 0 else {}, _tied(module) == tied, tied)


def _run_hf(rank: int, world_size: int, cases: list[HfCase]) -> list[HfResult | str]:
    import torch.distributed as dist

    out: list[HfResult | str] = []
    for case in cases:
        try:
            out.append(_train_hf(case, rank))
        except Exception as error:  # reported per case so one failure doesn't hide the rest
            out.append(f"{type(error).__name__}: {str(error)[:500]}")
            dist.barrier()
    return out


HF_CASES = [HfCase(m, o, b) for m in HF_MODELS for o, b in HF_OPTIONS if get(b).probe()]


@functools.cache
def _hf_results() -> dict[HfCase, HfResult | str]:
    from shardcompat.launch import spawn

    every = list(dict.fromkeys(c for case in HF_CASES for c in (case.reference, case)))
    results = spawn(_run_hf, 2, (every,), timeout=280)[0]
    return dict(zip(every, results))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: f"{c.model}-{c.backend}-{c.options.replace(' ', '_')}")
def test_a_transformers_model_with_a_tied_head_shards_and_trains_as_ddp(case: HfCase) -> None:
    pytest.importorskip("transformers")
    results = _hf_results()
    got, want = results[case], results[case.reference]
    assert isinstance(want, HfResult), want
    assert isinstance(got, HfResult), got
    assert (want.tied_names != []) == (case.model != "bert-mlm-untied")  # the control has no tied head
    assert max(abs(a - b) for a, b in zip(got.losses, want.losses)) <= FP32_TOL, (got.losses, want.losses)
    assert got.state.keys() == want.state.keys()
    diff = max(float((got.state[k].float() - want.state[k].float()).abs().max()) for k in want.state)
    assert diff <= FP32_TOL, f"final weights differ from DDP by {diff}"
    if case.backend != "fairscale-fsdp":  # its module holds flat parameters, not the model's own
        assert got.tied_in_module, "the trained module's head is no longer tied to its embedding"
    for names in want.tied_names:  # in the consolidated state: one tensor under every name
        present = [n for n in names if n in got.state]
        assert all(got.state[n] is got.state[present[0]] for n in present), names
    assert want.losses[-1] < want.losses[0], "the reference did not learn; the test would prove nothing"
