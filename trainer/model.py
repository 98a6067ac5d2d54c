"""EDMem (Zhang et al. 2022): a BART encoder-decoder with an entity memory read inside each stack.

    encoder:  embed -> L1 lower layers -> memory read at [Es] -> L2 upper layers
    decoder:  embed -> L1 lower layers (+ cross-attention) -> memory read at [Es] -> L2 upper layers
              -> LM head (tied to the token embedding)
              -> entity-linking head at [Es] (a third read of the same table)

A memory read at a position with hidden state h computes alpha = softmax(E W_in h),
h_ent = W_out sum_i alpha_i e_i and hands LayerNorm(h + h_ent) to the upper layers
(h_ent is zero away from [Es], as in EaE). The one entity table E is owned by
``EntityMemory`` and read only through its ``forward``, in one of two layouts:

- ``replicated``: E is the module's parameter; under ZeRO-3 DeepSpeed gathers the
  whole table around each of the three reads (today's behaviour, fine on one rank).
- ``rows``: each rank holds rows [rN/k, (r+1)N/k) in a ``RowShardedMemory`` kept
  outside the module tree (ZeRO never sees it) and reads go through the distributed
  blocked softmax of ``trainer.entity_softmax``: queries move, the table never does.

The LM head uses the token embedding outside the embedding's forward, so that
weight is registered as an external parameter of the model (``register_for_zero3``).

The transformer layers are transformers' BartEncoderLayer/BartDecoderLayer, so
a Hugging Face BART checkpoint maps onto them (``load_bart_weights``).
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BartConfig
from transformers.models.bart.modeling_bart import (
    BartDecoderLayer,
    BartEncoderLayer,
    BartLearnedPositionalEmbedding,
)

from schemas import SPECIAL_ENTITIES
from trainer.config import ModelConfig
from trainer.entity_softmax import blocked_entity_softmax, topk_entity_read
from trainer.lm_loss import linear_cross_entropy
from trainer.memory import RowShardedMemory, init_rows

FIRST_REAL_ENTITY_ID = len(SPECIAL_ENTITIES)
# Tokens per chunk of the LM loss: 2048 x 50,265 logits are 0.4 GB in float32 (a whole micro-batch of 128 x 160: 4 GB).
LM_LOSS_CHUNK_TOKENS = 2048


def _gathered(params: list[nn.Parameter]):
    """Full parameters for in-place initialisation: a ZeRO-3 gather when they are partitioned, else nothing."""
    if any(hasattr(p, "ds_id") for p in params):
        import deepspeed

        return deepspeed.zero.GatheredParameters(params, modifier_rank=0)
    return contextlib.nullcontext()  # ids 0..2 are [PAD], [UNK], [MASK]: never EL targets


@dataclass
class EDMemSpec:
    """Everything needed to rebuild the model (stored with exported weights)."""

    model: ModelConfig
    vocab_size: int
    n_entities: int
    pad_token_id: int
    entity_start_token_id: int  # [Es]
    decoder_start_token_id: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EDMemSpec":
        known = {f.name for f in dataclasses.fields(ModelConfig)}
        return cls(**{**d, "model": ModelConfig(**{k: v for k, v in d["model"].items() if k in known})})


def bart_config(spec: EDMemSpec) -> BartConfig:
    m = spec.model
    cfg = BartConfig(
        vocab_size=spec.vocab_size, d_model=m.d_model,
        encoder_layers=m.lower_layers + m.upper_layers, decoder_layers=m.lower_layers + m.upper_layers,
        encoder_attention_heads=m.attention_heads, decoder_attention_heads=m.attention_heads,
        encoder_ffn_dim=m.ffn_dim, decoder_ffn_dim=m.ffn_dim, max_position_embeddings=m.max_positions,
        dropout=m.dropout, attention_dropout=m.attention_dropout, activation_dropout=m.activation_dropout,
        pad_token_id=spec.pad_token_id, scale_embedding=False,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


PARTITIONS = ("replicated", "rows")


class EntityMemory(nn.Module):
    """The entity table and the three kinds of read; every read goes through ``forward``."""

    def __init__(self, n_entities: int, entity_dim: int, block_size: int, inference_top_k: int,
                 partition: str = "replicated", kernel: str = "auto"):
        super().__init__()
        if partition not in PARTITIONS:
            raise ValueError(f"memory partition must be one of {PARTITIONS}, got {partition!r}")
        self.n_entities, self.entity_dim, self.partition = n_entities, entity_dim, partition
        if partition == "replicated":
            self.table = nn.Parameter(torch.empty(n_entities, entity_dim))
        self.__dict__["rows"] = None  # a plain attribute: not a submodule, so DeepSpeed never touches it
        self.block_size = block_size
        self.inference_top_k = inference_top_k
        self.kernel = kernel  # backend of the softmax over the table (ModelConfig.memory_kernel)

    def attach_rows(self, rows: RowShardedMemory) -> None:
        if self.partition != "rows" or (rows.n_entities, rows.dim) != (self.n_entities, self.entity_dim):
            raise ValueError(f"cannot attach a {rows.n_entities} x {rows.dim} row shard to a {self.partition} "
                             f"{self.n_entities} x {self.entity_dim} memory")
        self.__dict__["rows"] = rows

    def forward(self, query: torch.Tensor, targets: torch.Tensor, need_read: bool = True):
        """query [M, De], targets [M] -> read [M, De] (or None), lse [M], target score [M], top1 [M].

        Always called, even with M = 0: every rank must take part in the collectives
        (ZeRO-3's gather of a replicated table, or the row-partitioned read).
        """
        top_k_read = need_read and not self.training and self.inference_top_k > 0
        if self.partition == "replicated":
            table, split, own_grad = self.table, {}, False  # ZeRO / autograd own its gradient
        else:
            rows = self.rows
            if rows is None:
                raise RuntimeError("a row-partitioned memory needs its rows: EntityMemory.attach_rows")
            table, split = rows.weight, dict(row_start=rows.row_start, group=rows.group, counter=rows.comm)
            own_grad = True  # nothing else manages the rows: the reads add into rows.weight.grad directly
        lse, read, top1, target_score = blocked_entity_softmax(query, table, self.block_size, targets,
                                                               need_read and not top_k_read, **split,
                                                               accumulate_grad=own_grad, kernel=self.kernel)
        if top_k_read:
            read, _, _ = topk_entity_read(query, table, self.inference_top_k, self.block_size,
                                          n_entities=self.n_entities, **split)
        return (read.to(query.dtype) if need_read else None), lse, target_score, top1


class MemoryAccess(nn.Module):
    """W_in, W_out and the LayerNorm of one read site (encoder or decoder)."""

    def __init__(self, d_model: int, entity_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(d_model, entity_dim)  # W_in
        self.out_proj = nn.Linear(entity_dim, d_model)  # W_out
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, hidden, positions, targets, memory: EntityMemory):
        batch_idx, time_idx = positions
        query = self.query_proj(hidden[batch_idx, time_idx])
        read, lse, target_score, top1 = memory(query, targets)
        h_ent = torch.zeros_like(hidden).index_put((batch_idx, time_idx), self.out_proj(read).to(hidden.dtype))
        return self.layer_norm(hidden + h_ent), (lse, target_score, top1)


class EDMemStack(nn.Module):
    """Lower layers, a memory access, upper layers; the encoder or the decoder."""

    def __init__(self, bart: BartConfig, m: ModelConfig, is_decoder: bool, with_memory: bool = True):
        super().__init__()
        layer_cls = BartDecoderLayer if is_decoder else BartEncoderLayer
        self.is_decoder = is_decoder
        self.embed_positions = BartLearnedPositionalEmbedding(m.max_positions, m.d_model)
        self.layernorm_embedding = nn.LayerNorm(m.d_model)
        self.lower = nn.ModuleList([layer_cls(bart, layer_idx=i) for i in range(m.lower_layers)])
        self.memory_access = MemoryAccess(m.d_model, m.entity_dim) if with_memory else None
        self.upper = nn.ModuleList([layer_cls(bart, layer_idx=m.lower_layers + i) for i in range(m.upper_layers)])
        self.dropout = m.dropout

    def forward(self, embeds, input_ids, self_mask, positions, targets, memory, encoder_states=None, cross_mask=None):
        """memory None: no memory access at all (the plain BART stack, for the reference test)."""
        h = embeds + self.embed_positions(input_ids)
        h = F.dropout(self.layernorm_embedding(h), p=self.dropout, training=self.training)
        kw = dict(encoder_hidden_states=encoder_states, encoder_attention_mask=cross_mask, use_cache=False) \
            if self.is_decoder else {}
        for layer in self.lower:
            h = layer(h, self_mask, **kw)
        el = None
        if memory is not None:
            h, el = self.memory_access(h, positions, targets, memory)
        for layer in self.upper:
            h = layer(h, self_mask, **kw)
        return h, el


class EDMem(nn.Module):
    def __init__(self, spec: EDMemSpec, el_weight: float = 1.0, memory_partition: str = "replicated",
                 init_seed: int = 0):
        super().__init__()
        self.spec = spec
        self.el_weight = el_weight  # lambda_EL
        self.init_seed = init_seed  # of the entity table (chunk-seeded: the same values in every layout)
        m = spec.model
        bart = bart_config(spec)
        # model.memory 'none': the same BART stacks without the table, the read sites and the linking head
        # (no parameter DeepSpeed would see unused), trained on the LM loss alone: the ablation baseline.
        self.has_memory = m.memory != "none"
        self.shared = nn.Embedding(spec.vocab_size, m.d_model, padding_idx=spec.pad_token_id)
        self.encoder = EDMemStack(bart, m, is_decoder=False, with_memory=self.has_memory)
        self.decoder = EDMemStack(bart, m, is_decoder=True, with_memory=self.has_memory)
        self.entity_memory = self.el_head = None
        if self.has_memory:
            self.entity_memory = EntityMemory(spec.n_entities, m.entity_dim, m.entity_block_size, m.inference_top_k,
                                              memory_partition, m.memory_kernel)
            self.el_head = nn.Sequential(nn.LayerNorm(m.d_model), nn.Linear(m.d_model, m.entity_dim))
        self.reset_parameters()

    @property
    def entity_init_std(self) -> float:
        m = self.spec.model
        return m.entity_init_std if m.entity_init_std > 0 else m.entity_dim ** -0.5

    @property
    def query_init_std(self) -> float:
        m = self.spec.model
        return m.query_init_std if m.query_init_std > 0 else m.d_model ** -0.5

    def query_projections(self) -> list[nn.Linear]:
        """W_in of the encoder and decoder reads and the linking head's projection: they make the queries."""
        if not self.has_memory:
            return []
        return [self.encoder.memory_access.query_proj, self.decoder.memory_access.query_proj, self.el_head[1]]

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) matrices, zero biases, unit LayerNorms; the same values with or without ZeRO-3.

        The memory's scales differ (see docs/pretraining.md, "The memory's initial scales"): the
        table rows ~ N(0, 1/D) (unit norm) and the query projections ~ N(0, 1/d_model) (unit-
        variance queries), so the EL logits start at std ~1 instead of ~0.01.
        """
        std = self.spec.model.init_std
        queries = {id(p) for lin in self.query_projections() for p in lin.parameters()}
        for module in self.modules():
            own = list(module.parameters(recurse=False))
            if not own:
                continue
            with _gathered(own):  # under zero.Init the parameters are already partitioned
                if isinstance(module, nn.Linear):
                    module.weight.normal_(0.0, self.query_init_std if id(module.weight) in queries else std)
                    if module.bias is not None:
                        module.bias.zero_()
                elif isinstance(module, nn.Embedding):
                    module.weight.normal_(0.0, std)
                    if module.padding_idx is not None:
                        module.weight[module.padding_idx].zero_()
                elif isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()
                elif isinstance(module, EntityMemory):
                    n, d = self.spec.n_entities, self.spec.model.entity_dim
                    module.table.copy_(init_rows(n, d, 0, n, self.entity_init_std, self.init_seed))

    def make_rows(self, rank: int = 0, world_size: int = 1, group=None, device="cpu") -> RowShardedMemory:
        """This rank's rows of the table, initialised like the replicated table, attached to the memory."""
        rows = RowShardedMemory(self.spec.n_entities, self.spec.model.entity_dim, rank, world_size, group, device)
        rows.init_weights(self.entity_init_std, self.init_seed)
        self.entity_memory.attach_rows(rows)
        return rows

    def register_for_zero3(self) -> None:
        """The LM head reads shared.weight outside nn.Embedding.forward: tell ZeRO-3 to gather it for us."""
        import deepspeed

        deepspeed.zero.register_external_parameter(self, self.shared.weight)

    def num_parameters(self, exclude_entity_table: bool = False) -> int:
        """All parameters, the entity table counted once whether replicated or split by rows."""
        total = sum(getattr(p, "ds_numel", p.numel()) for p in self.parameters())
        if not self.has_memory:
            return total
        table = self.spec.n_entities * self.spec.model.entity_dim
        if self.entity_memory.partition == "rows":
            total += table
        return total - table if exclude_entity_table else total

    def encode_decode(self, input_ids, attention_mask, decoder_input_ids, entity_ids=None, decoder_entity_ids=None,
                      use_memory: bool = True):
        """-> encoder states, decoder states, [Es] positions and EL read results of both stacks."""
        es = self.spec.entity_start_token_id
        use_memory = use_memory and self.has_memory
        memory = self.entity_memory if use_memory else None
        enc_mask = attention_mask[:, None, None, :].bool()  # [B, 1, 1, S]: attend to non-pad keys
        enc_pos = dec_pos = enc_targets = dec_targets = None
        if use_memory:
            enc_pos = torch.nonzero(input_ids == es, as_tuple=True)
            enc_targets = entity_ids[enc_pos].clamp(min=0)
            dec_pos = torch.nonzero(decoder_input_ids == es, as_tuple=True)
            dec_targets = decoder_entity_ids[dec_pos].clamp(min=0)
        enc_h, enc_el = self.encoder(self.shared(input_ids), input_ids, enc_mask, enc_pos, enc_targets, memory)
        # Decoder self-attention mask None = causal; pads sit after every real token so no real query sees one.
        dec_h, dec_el = self.decoder(self.shared(decoder_input_ids), decoder_input_ids, None, dec_pos, dec_targets,
                                     memory, encoder_states=enc_h, cross_mask=enc_mask)
        return enc_h, dec_h, (enc_pos, enc_targets, enc_el), (dec_pos, dec_targets, dec_el)

    def lm_logits(self, input_ids, attention_mask, decoder_input_ids, **kw) -> torch.Tensor:
        """[B, S, V] LM logits (tied head); ``use_memory=False`` gives the plain BART computation."""
        _, dec_h, _, _ = self.encode_decode(input_ids, attention_mask, decoder_input_ids, **kw)
        return F.linear(dec_h, self.shared.weight)

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels, entity_ids, decoder_entity_ids,
                masked_mentions=None, decoder_masked_mentions=None, **_unused):
        """Returns sums and counts (so ranks and micro-batches aggregate exactly) and the loss to optimise.

        loss = LM cross-entropy (mean over target tokens) + el_weight * the mean over the three reads of
        the EL cross-entropy (each a mean over mentions with a known entity), as EDMem averages them: at
        el_weight 1 the EL term weighs as much as one read's loss, not three. A batch without such mentions
        contributes 0 to the EL term: its sum is over an empty set, no NaN to hide. ``lm_term`` and
        ``el_term`` (el_weight x EL) keep their graph, for the per-loss gradient norms the trainer logs.
        """
        _, dec_h, (enc_pos, enc_targets, enc_el), (dec_pos, dec_targets, dec_el) = self.encode_decode(
            input_ids, attention_mask, decoder_input_ids, entity_ids, decoder_entity_ids)
        if self.has_memory:
            _, head_lse, head_target, head_top1 = self.entity_memory(self.el_head(dec_h[dec_pos]), dec_targets,
                                                                     need_read=False)

        # LM: the tied head and its cross-entropy over chunks of the target tokens (trainer.lm_loss): logits in
        # the weights' dtype, log-sum-exp in float32, never the whole [tokens x vocabulary] logit matrix at once.
        target_mask = labels.ne(-100)
        lm_sum, _ = linear_cross_entropy(dec_h[target_mask], self.shared.weight, labels[target_mask],
                                         LM_LOSS_CHUNK_TOKENS)
        lm_tokens = target_mask.sum()
        if not self.has_memory:
            return lm_only_outputs(lm_sum, lm_tokens)

        enc_known = enc_targets >= FIRST_REAL_ENTITY_ID
        dec_known = dec_targets >= FIRST_REAL_ENTITY_ID
        reads = {"enc": (enc_el, enc_targets, enc_known), "dec": (dec_el, dec_targets, dec_known),
                 "head": ((head_lse, head_target, head_top1), dec_targets, dec_known)}
        out = {}
        el_loss = lm_sum.new_zeros(())
        for name, ((lse, target_score, top1), targets, known) in reads.items():
            ce_sum = ((lse - target_score) * known).sum()
            count = known.sum()
            el_loss = el_loss + ce_sum / count.clamp(min=1) / len(reads)
            out[f"el_{name}_sum"], out[f"el_{name}_count"] = ce_sum.detach(), count
            out[f"el_{name}_correct"] = ((top1 == targets) & known).sum()  # acc@1 of this read
        lm_loss = lm_sum / lm_tokens.clamp(min=1)

        # EL accuracy@1 of the final head, on mentions whose tokens were masked in the encoder input.
        masked = dec_known if decoder_masked_mentions is None else decoder_masked_mentions[dec_pos] & dec_known
        hit = head_top1 == dec_targets
        out.update({
            "loss": lm_loss + self.el_weight * el_loss, "lm_term": lm_loss, "el_term": self.el_weight * el_loss,
            "lm_loss": lm_loss.detach(), "el_loss": el_loss.detach(),
            "lm_sum": lm_sum.detach(), "lm_tokens": lm_tokens,
            "el_correct_masked": (hit & masked).sum(), "el_masked": masked.sum(),
            "el_correct": (hit & dec_known).sum(),
        })
        return out


EL_COUNTERS = tuple(f"el_{read}_{kind}" for read in ("enc", "dec", "head") for kind in ("sum", "count", "correct")) + (
    "el_correct_masked", "el_masked", "el_correct")


def lm_only_outputs(lm_sum: torch.Tensor, lm_tokens: torch.Tensor) -> dict:
    """forward's outputs for model.memory 'none': the LM loss, and zero EL counters (the trainer's sums stay whole)."""
    lm_loss = lm_sum / lm_tokens.clamp(min=1)
    zero = lm_tokens.new_zeros(())
    return {"loss": lm_loss, "lm_term": lm_loss, "lm_loss": lm_loss.detach(), "el_loss": lm_sum.new_zeros(()),
            "lm_sum": lm_sum.detach(), "lm_tokens": lm_tokens, **dict.fromkeys(EL_COUNTERS, zero)}
