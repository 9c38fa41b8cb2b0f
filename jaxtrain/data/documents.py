"""Document boundaries inside a training window: segment ids, positions and the EOD loss mask.

Boundaries come from the shards' own indexes (`X.ds.index`, the `.idx` sequence lengths), never
from scanning tokens, so they are exact whether or not the tokenizer appended an EOS. Both
tokenizers (datatrove's and Megatron's preprocessing) end every document with one EOS, so a
document here is "its tokens and the EOS after them", as in Megatron's
`get_ltor_masks_and_position_ids` and datatrove's `positions`:

- `segment_ids` (reset_attention_mask): 1 for the first (possibly partial) document of a row, then
  2, 3, ... after each document end; attention never crosses a change of id. 0 is left unused so it
  can mean padding for attention kernels that reserve it.
- `positions` (reset_position_ids): 0, 1, 2, ... restarting at every document start and at the
  start of the row (a document cut by the window start is numbered from 0 there too, as both
  Megatron and datatrove do).
- EOD loss masking (eod_mask_loss): no loss where the input token is a document's last token
  (its EOS), i.e. on predicting the first token of the next document; Megatron's
  `loss_mask[data == eod_token] = 0`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class DocumentOptions:
    """Which document-boundary fields a batch carries (`data.reset_*`, `data.eod_mask_loss`)."""

    reset_attention_mask: bool = False
    reset_position_ids: bool = False
    eod_mask_loss: bool = False

    @property
    def needs_boundaries(self) -> bool:
        """Whether any field needs the document ends of a window."""
        return self.reset_attention_mask or self.reset_position_ids or self.eod_mask_loss

    @classmethod
    def from_config(cls, data: Any) -> DocumentOptions:
        """The options of a `data` config section."""
        return cls(
            bool(data.reset_attention_mask), bool(data.reset_position_ids), bool(data.eod_mask_loss)
        )


def boundary_fields(
    ends: np.ndarray, seq_len: int, options: DocumentOptions
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Fields of one row from its document ends; returns (fields, loss multiplier or None).

    `ends` holds, sorted, the offsets r in (0, seq_len] inside the row's input tokens at which a
    new document starts (the previous one's EOS is input r - 1).
    """
    ends = np.asarray(ends, np.int64)
    t = np.arange(seq_len)
    doc = np.searchsorted(ends, t, side="right")  # documents started before or at t
    fields: dict[str, np.ndarray] = {}
    if options.reset_attention_mask:
        fields["segment_ids"] = (doc + 1).astype(np.int32)
    if options.reset_position_ids:
        starts = np.concatenate([np.zeros(1, np.int64), ends])[doc]
        fields["positions"] = (t - starts).astype(np.int32)
    keep = None
    if options.eod_mask_loss:
        keep = np.ones(seq_len, np.float32)
        keep[ends - 1] = 0.0
    return fields, keep
