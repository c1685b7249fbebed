"""The tensors saved for backward: each layer's (by fine-tuning role, sliding window and recomputation), the
embedding's, the head's and the loss's."""

from __future__ import annotations

from app.core import activations as act
from app.core.classifier_tensors import logits_shape, upcasts_logits
from app.core.contributors.base import (
    BWD_EMBEDDING,
    BWD_HEAD,
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    BWD_LOSS,
    FWD_EMBEDDING,
    FWD_LOSS,
    _listed,
)
from app.core.contributors.offload import ActivationOffloading
from app.core.families import family_of
from app.core.finetuning import layer_role, layer_roles
from app.core.recompute import describe as describe_recomputation
from app.core.recompute import kept_layer_role
from app.core.timeline import Life
from app.core.units import ceil_div


class SavedTensors(ActivationOffloading):
    def activations(self) -> None:
        arch, setup, kind, training = self.arch, self.setup, self.kind, self.training
        checkpointing = self.checkpointing
        n = kind.layers
        b, s, h = setup.micro_batch_size, setup.seq_len, arch.hidden_size
        policy = act.CHECKPOINTING_CHOICES[checkpointing].about
        if self.recomputed.partial:
            policy = describe_recomputation(training.recompute_every, training.recompute_first_layers)
            per_layer = act.total_bytes(self.layer_saved)  # a kept layer's
            layers_bytes, layers_text = self._partly_recomputed_layers()
        else:
            per_layer = act.total_bytes(act.checkpointed_layer_activations(arch, setup, checkpointing,
                                                                           full=self.layer_saved))
            layers_bytes, layers_text = n * per_layer, f"{n} layers × {per_layer:,} B"
            if self.dense:
                dense_full = act.layer_activations(arch, setup, dense=True)
                per_dense = act.total_bytes(act.checkpointed_layer_activations(arch, setup, checkpointing,
                                                                               full=dense_full))
                layers_bytes = (n - self.dense) * per_layer + self.dense * per_dense
                layers_text = f"{n - self.dense} layers × {per_layer:,} B + {self.dense} dense layers × {per_dense:,} B"
        if self.finetuned is not None:
            layers_bytes, layers_text = self._finetuned_layers(per_layer)
        window_layers, window_each = self._sliding_window_extra()
        if window_each:
            layers_bytes += window_layers * window_each
            layers_text += (f" {'+' if window_each > 0 else '−'} {window_layers} sliding-window layers × "
                            f"{abs(window_each):,} B (what sdpa keeps once the window is passed as a mask)")
        self._layers_saved(f"{n} layers' saved tensors ({policy}), b={b}, s={s:,}, h={h:,}", layers_text,
                           layers_bytes)
        embedding = 0
        if kind.first:
            first = act.embedding_activations(arch, setup)
            embedding = act.total_bytes(first)
            self.add("activations.embedding", "activations",
                     "Embedding: token ids, positions or rotary cos/sin, dropout mask",
                     _listed(first), embedding, embedding * self.ranks,
                     Life("micro-batch", FWD_EMBEDDING, BWD_EMBEDDING))
            kwargs = act.checkpoint_held_activations(arch, setup, checkpointing)
            full_mask = tuple(x for x in kwargs if x.name == act.FULL_ATTENTION_MASK)
            kwargs = tuple(x for x in kwargs if x.name != act.FULL_ATTENTION_MASK)
            if kwargs:
                # kept by each layer's recomputation closure: freed with the first layer's backward
                held_bytes = act.total_bytes(kwargs)
                embedding += held_bytes
                self.add("activations.checkpoint_held", "activations", "Keyword arguments recomputation keeps for "
                         "every layer until its backward (position ids, masks)", _listed(kwargs), held_bytes,
                         held_bytes * self.ranks, Life("micro-batch", FWD_EMBEDDING, self.bwd_end))
            if full_mask:
                embedding += self._full_attention_mask(full_mask)
        self._in_flight(layers_bytes, embedding)
        self._head_and_loss()

    def _partly_recomputed_layers(self) -> tuple[int, str]:
        """Some layers recomputed (`app.core.recompute`): each keeps its input, the others everything they save; a
        mixture's dense first layers keep their own."""
        arch, setup, recomputed = self.arch, self.setup, self.recomputed
        kept = recomputed.layers - recomputed.count
        per_kept = act.total_bytes(self.layer_saved)
        per_recomputed = act.total_bytes(act.checkpointed_layer_activations(arch, setup, "full"))
        dense_kept = self.dense - recomputed.among_first(self.dense)
        terms = [(kept - dense_kept, "kept layers", per_kept), (recomputed.count, "recomputed layers", per_recomputed)]
        if dense_kept:
            per_dense = act.total_bytes(act.layer_activations(arch, setup, dense=True))
            terms.append((dense_kept, "kept dense layers", per_dense))
        terms = [term for term in terms if term[0]]
        return (sum(count * each for count, _, each in terms),
                " + ".join(f"{count} {words} × {each:,} B" for count, words, each in terms))

    def _in_flight(self, layers_bytes: int, embedding: int) -> None:
        """The micro-batches a pipeline stage holds beyond the current one (1F1B), and the interleaved schedule's
        chunks of layers."""
        kind, n = self.kind, self.kind.layers
        others = kind.in_flight - 1
        if others > 0:
            held = layers_bytes + embedding
            others_total = kind.in_flight_total - kind.count
            self.add("activations.in_flight", "activations",
                     f"{others} more micro-batches in flight on this stage (1F1B)",
                     f"{others} × {held:,} B", others * held, held * others_total * self.ranks,
                     Life("micro-batch", self.phases[0].id, self.phases[-1].id))
        if kind.extra_chunks:
            chunk = layers_bytes // n * kind.chunk_layers
            size = kind.extra_chunks * chunk
            self.add("activations.interleaved", "activations",
                     f"{kind.extra_chunks} more chunks of {kind.chunk_layers} layers in flight (interleaved schedule, "
                     f"{n // kind.chunk_layers} virtual stages)",
                     f"{kind.extra_chunks} × {kind.chunk_layers} layers × {layers_bytes // n:,} B "
                     "(Korthikanti et al. 2022, section 4.2.3)", size,
                     kind.extra_chunks_total * chunk * self.ranks,
                     Life("micro-batch", self.phases[0].id, self.phases[-1].id))

    def _head_and_loss(self) -> None:
        """The last stage's final norm and output layer's input, and the loss's saved tensors."""
        arch, setup, kind, training = self.arch, self.setup, self.kind, self.training
        kept = "fp32 softmax or log-probabilities (4 B × " if upcasts_logits(arch, setup) else "log-probabilities ("
        if kind.last:
            head = act.head_activations(arch, setup)
            loss = tuple(item for item in head if item.name.startswith(("loss.", "logits.")))
            rest = tuple(item for item in head if item not in loss)
            loss_end = BWD_HEAD if training.implementation == "megatron" else BWD_LOSS
            label = "The classification head's saved tensors" if family_of(arch).classifier else \
                "Final norm and the output layer's input"
            self.add("activations.head", "activations", label, _listed(rest),
                     act.total_bytes(rest), act.total_bytes(rest) * self.ranks, Life("micro-batch", FWD_LOSS, BWD_HEAD))
            if loss:  # none with a fused linear cross entropy (its gradients are kept instead)
                self.add("activations.loss", "activations",
                         f"The loss's saved tensors: {kept}{logits_shape(arch, setup)[2]}) and the labels",
                         _listed(loss), act.total_bytes(loss),
                         act.total_bytes(loss) * self.ranks, Life("micro-batch", FWD_LOSS, loss_end))

    def _sliding_window_extra(self) -> tuple[int, int]:
        """The stage's sliding-window layers (at most their share of the model's, rounded up) and what each keeps
        beyond a full-attention layer, which may be less (`act.sliding_window_layer`): under full recomputation a
        layer keeps only its input; selective recomputation drops what belongs to core attention."""
        arch, checkpointing = self.arch, self.checkpointing
        if not arch.sliding_window_layers or self.recomputed.all:
            return 0, 0
        kept = self.kind.layers - self.recomputed.count
        if self.recomputed.partial:  # the kept layers keep what sdpa keeps (their share, rounded up)
            checkpointing = "none"
        sliding = act.sliding_window_layer(arch, self.setup)
        if sliding == self.layer_saved:
            return 0, 0
        each = (act.total_bytes(act.checkpointed_layer_activations(arch, self.setup, checkpointing, full=sliding))
                - act.total_bytes(act.checkpointed_layer_activations(arch, self.setup, checkpointing,
                                                                     full=self.layer_saved)))
        if not each:
            return 0, 0
        layers = min(kept, ceil_div(kept * arch.sliding_window_layers, arch.num_hidden_layers))
        return layers, each

    def _finetuned_layers(self, full_layer: int) -> tuple[int, str]:
        """The stage's layers by their part in backward (finetuning.layer_role): the lowest trainable layer keeps
        nothing for its input, frozen layers with nothing trainable below keep nothing at all."""
        arch, setup, checkpointing = self.arch, self.setup, self.checkpointing
        if self.recomputed.partial:
            return self._partly_recomputed_roles()
        first = self.kind.first_layer - 1
        roles = layer_roles(self.training.finetuning, first, self.kind.layers)
        words = {"full": "layers", "bottom": "lowest trainable layer", "through": "frozen layers gradients pass "
                 "through", "off": "frozen layers with nothing trainable below"}
        # A mixture's dense first layers (only with adapters, setup._check_moe_finetuning): the lowest one is the
        # lowest trainable layer when the stage holds it, the rest take the full role.
        dense = self.dense
        dense_roles = {}
        if dense:
            bottom = int(roles.get("bottom", 0) > 0 and first == 0)
            dense_roles = {"bottom": bottom, "full": dense - bottom}
        total, terms = 0, []
        for role, count in roles.items():
            for is_dense, number in ((True, dense_roles.get(role, 0)), (False, count - dense_roles.get(role, 0))):
                if not number:
                    continue
                if role == "full" and not is_dense:
                    each = full_layer
                elif role == "off":
                    each = 0
                elif checkpointing == "full":
                    each = act.total_bytes(act.checkpointed_layer_activations(arch, setup, "full"))
                else:
                    each = act.total_bytes(act.checkpointed_layer_activations(
                        arch, setup, checkpointing, full=act.layer_activations(arch, setup, role, dense=is_dense)))
                total += number * each
                word = words[role] if number > 1 or role != "full" else "layer"
                terms.append(f"{number} {'dense ' if is_dense else ''}{word} × {each:,} B")
        return total, " + ".join(terms)

    def _partly_recomputed_roles(self) -> tuple[int, str]:
        """`_finetuned_layers` with some layers recomputed: a recomputed layer keeps its input (nothing when autograd
        records nothing in it), a kept one what its part in backward needs. Layers from the lowest trainable one up
        take the full role, so only those below it are looked at one by one."""
        arch, setup, recomputed, ft = self.arch, self.setup, self.recomputed, self.training.finetuning
        first, n = self.kind.first_layer - 1, self.kind.layers
        groups: dict[tuple[str, bool, bool], int] = {}
        below = min(n, max(0, ft.frozen_layers + 1 - first))  # positions under the lowest layer that takes "full"
        for index in range(below):
            role = layer_role(ft, first + index)
            if not recomputed.is_recomputed(index):
                role = kept_layer_role(role)
            key = (role, index < self.dense, recomputed.is_recomputed(index))
            groups[key] = groups.get(key, 0) + 1
        dense_above = max(0, self.dense - below)
        dense_recomputed = recomputed.among_first(below + dense_above) - recomputed.among_first(below)
        rest_recomputed = recomputed.among_first(n) - recomputed.among_first(below + dense_above)
        for key, count in ((("full", True, True), dense_recomputed), (("full", True, False), dense_above - dense_recomputed),
                           (("full", False, True), rest_recomputed),
                           (("full", False, False), n - below - dense_above - rest_recomputed)):
            if count:
                groups[key] = groups.get(key, 0) + count
        per_recomputed = act.total_bytes(act.checkpointed_layer_activations(arch, setup, "full"))
        total, terms = 0, []
        for (role, is_dense, is_recomputed), count in groups.items():
            if role == "off":
                each = 0
            elif is_recomputed:
                each = per_recomputed
            elif role == "full" and not is_dense:
                each = act.total_bytes(self.layer_saved)
            else:
                each = act.total_bytes(act.layer_activations(arch, setup, role, dense=is_dense))
            total += count * each
            terms.append(f"{count} {'recomputed' if is_recomputed else 'kept'} {'dense ' if is_dense else ''}"
                         f"{role} layer{'s' if count > 1 else ''} × {each:,} B")
        return total, " + ".join(terms)

    def _full_attention_mask(self, mask: tuple[act.SavedTensor, ...]) -> int:
        """With sliding-window and full-attention layers, eager attention under full recomputation keeps a second
        mask (`act.checkpoint_held_activations`): the full-attention layers' recomputation closures keep it until the
        lowest of them has run its backward, one layer before the first (a sliding-window layer in gpt-oss and
        Gemma 3). The first layer's event stands for both: it holds the mask less one layer's gradients where that
        is more (measured on CPU with gpt-oss from 128 to 2,048 positions: docs/VALIDATION.md). Returns the bytes
        kept through the forward."""
        size = act.total_bytes(mask)
        self.add("activations.checkpoint_full_mask", "activations", "The full-attention layers' mask, kept by their "
                 "recomputation until the lowest one's backward", _listed(mask),
                 size, size * self.ranks, Life("micro-batch", FWD_EMBEDDING, BWD_LAYER_LAST))
        beyond = size - self._layer_gradient_bytes()
        if self.kind.layers > 1 and beyond > 0:
            self.add("activations.checkpoint_full_mask_lowest", "activations", "The lowest full-attention layer's "
                     "backward, the layer before the first: the full-attention mask, less one layer's gradients",
                     f"{size:,} B − {size - beyond:,} B", beyond, beyond * self.ranks,
                     Life("micro-batch", BWD_LAYER_FIRST, only=(BWD_LAYER_FIRST,)))
        return size
