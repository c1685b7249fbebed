"""What an encoder with a sequence-classification head keeps outside its layers (`families.SequenceClassifier`):
the embeddings' ids, LayerNorm and dropout, and the head over the first token with its loss over num_labels.
Measured on CPU: docs/VALIDATION.md, "Encoders"."""

from __future__ import annotations

from app.core.architecture import Architecture
from app.core.classifier_tensors import classifier_dropout, num_labels
from app.core.families import SequenceClassifier
from app.core.saved.common import FP32_BYTES, INDEX_BYTES, ActivationSetup, SavedTensor, _Saved
from app.core.saved.hf_parts import _hf_norm


def classifier_embedding(arch: Architecture, setup: ActivationSetup, head: SequenceClassifier) -> list[SavedTensor]:
    """The ids the three embedding tables' backward reads (int64: the tokens, b x s; the positions, BERT's whole
    1 x max_position_embeddings buffer, of which it slices a view, or RoBERTa's b x s numbered from the tokens; the
    token types gathered by the positions, 1 x s or b x s), the LayerNorm of their sum and its dropout's mask.
    BertEmbeddings.forward, RobertaEmbeddings.forward (transformers 5.24)."""
    saved = _Saved(setup)
    n, s, h = setup.tokens, setup.seq_len, arch.hidden_size
    saved.add("embed.token_ids", n, INDEX_BYTES, "none")
    saved.add("embed.position_ids", n if head.positions_from_tokens else arch.max_position_embeddings, INDEX_BYTES,
              "none")
    saved.add("embed.token_type_ids", n if head.positions_from_tokens else s, INDEX_BYTES, "none")
    _hf_norm(saved, "input_norm", arch, setup)
    if arch.dropout > 0:
        saved.mask("embed.dropout_mask", n * h, setup.stream_bytes, "sequence")
    return saved.items


def classifier_head(arch: Architecture, setup: ActivationSetup, head: SequenceClassifier) -> list[SavedTensor]:
    """The head over the first token (BertPooler and the classifier; RobertaClassificationHead) and its loss.

    The dense keeps its input: under autocast its own b x h half cast; otherwise BERT's first-token view, so the
    whole b x s x h last hidden state, and RoBERTa's dropped b x h copy (with the mask), or the view where dropout is
    off (dropout at 0 hands on its input). tanh keeps its output, which with dropout off is also the classifier's
    input; with dropout the mask and the dropped copy. The cross entropy keeps the log-probabilities, b x num_labels
    in the logits' dtype (no upcast) or fp32 under autocast (log_softmax runs in fp32 there), and the int64 labels.
    """
    saved = _Saved(setup)
    b, n, h = setup.micro_batch_size, setup.tokens, arch.hidden_size
    dropout = classifier_dropout(arch) > 0
    half, stream = setup.half_bytes, setup.stream_bytes
    if dropout and not head.pooled_view:
        saved.mask("classifier.input_dropout_mask", b * h, stream, "none")
    if setup.autocast:
        saved.add("classifier.dense_input (half cast)", b * h, half, "none")
    elif head.pooled_view or not dropout:
        saved.add("classifier.dense_input (the last hidden state, viewed)", n * h, stream, "none")
    else:
        saved.add("classifier.dense_input", b * h, stream, "none")
    saved.add("classifier.tanh_output", b * h, half, "none")
    if dropout:
        saved.mask("classifier.dropout_mask", b * h, half, "none")
        saved.add("classifier.output_input", b * h, half, "none")
    saved.add("loss.log_softmax", b * num_labels(arch), FP32_BYTES if setup.autocast else half, "none")
    saved.add("loss.labels", b, INDEX_BYTES, "none")
    return saved.items
