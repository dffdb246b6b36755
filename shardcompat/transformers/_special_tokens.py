"""4.x's ``build_inputs_with_special_tokens`` and ``create_token_type_ids_from_sequences`` for any
tokenizer: the kept 4.x datasets (``TextDataset``, SQuAD's spans) place special tokens around ids
they cut themselves.  5.x's tokenizers lost both methods; their template is read once from a copy
of the backend's post-processor (the tokenizer's own backend keeps whatever truncation and
padding its last call set, and is not touched), applied to placeholder sequences."""

from __future__ import annotations

import weakref
from typing import Any

#: Per tokenizer, per single/pair: the template, each entry a special token (id, type id) or a
#: sequence's slot (None, type id).
_TEMPLATES: weakref.WeakKeyDictionary[Any, dict[bool, list[tuple[int | None, int]]]] = weakref.WeakKeyDictionary()


def _template(tokenizer: Any, pair: bool) -> list[tuple[int | None, int]]:
    known = _TEMPLATES.setdefault(tokenizer, {})
    if pair not in known:
        import tokenizers

        backend = tokenizers.Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        backend.no_truncation()
        backend.no_padding()
        first = backend.encode("a", add_special_tokens=False)
        second = backend.encode("a", add_special_tokens=False) if pair else None  # its own object, or ids go astray
        if not first.ids:
            raise ValueError(f"{type(tokenizer).__name__} encodes no token for 'a', so where its special tokens go "
                             "cannot be read from it; build the inputs with the tokenizer's own call instead")
        done = backend.post_process(first, second, add_special_tokens=True)
        template: list[tuple[int | None, int]] = []
        for token, kind, special in zip(done.ids, done.type_ids, done.special_tokens_mask):
            if special:
                template.append((token, kind))
            elif not template or template[-1][0] is not None:  # a placeholder's first token: its slot
                template.append((None, kind))
        known[pair] = template
    return known[pair]


def build(tokenizer: Any, first: list[int], second: list[int] | None = None) -> tuple[list[int], list[int]]:
    """``first`` (and ``second``) with the tokenizer's special tokens, and the token type ids."""
    made = getattr(tokenizer, "build_inputs_with_special_tokens", None)
    if made is not None:  # a 4.x tokenizer (or a 5.x Python one)
        return list(made(first, second)), list(tokenizer.create_token_type_ids_from_sequences(first, second))
    sequences = iter([first] if second is None else [first, second])
    ids: list[int] = []
    types: list[int] = []
    for token, kind in _template(tokenizer, second is not None):
        if token is None:
            sequence = next(sequences, [])
            ids.extend(sequence)
            types.extend([kind] * len(sequence))
        else:
            ids.append(token)
            types.append(kind)
    return ids, types
