"""Hugging Face transformers models as their users build them: each architecture from its own
config class with small sizes (randomly initialised: nothing is downloaded), in eval mode, with
the inputs a user passes (`input_ids`, `pixel_values`, `input_values`, `input_features`) and every
other setting (KV caches included) left at the library's default."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

BATCH, SEQ, VOCAB = 2, 16, 512
# sizes shared by the text models: 2 layers of width 64, 4 heads, as a tiny checkpoint has them
TEXT = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=128)
DECODER = dict(TEXT, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
VISION = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=128)


@dataclass(frozen=True)
class ZooModel:
    """One architecture: its modality, its kind (encoder, decoder, encoder-decoder), the model
    class and config class names in transformers, the config's sizes, and its example inputs."""

    modality: str
    kind: str
    model_class: str
    config_class: str
    config: dict[str, Any]
    inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]

    def build(self) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
        """The model, seeded and in eval mode, and its example inputs (seeded too). Its cache
        classes are registered as pytrees, as the library's exporter registers them, so its
        outputs (a DynamicCache too) flatten to their tensors and compare leaf by leaf."""
        import transformers
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

        torch.manual_seed(0)
        config = getattr(transformers, self.config_class)(**self.config)
        model = getattr(transformers, self.model_class)(config).eval()
        register_cache_pytrees_for_model(model)
        return model, self.inputs(torch.Generator().manual_seed(0))


def token_ids(g: torch.Generator, vocab: int = VOCAB, seq: int = SEQ) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(3, vocab, (BATCH, seq), generator=g)}


def seq2seq_ids(g: torch.Generator) -> dict[str, torch.Tensor]:
    return {**token_ids(g), "decoder_input_ids": torch.randint(3, VOCAB, (BATCH, SEQ // 2), generator=g)}


def images(size: int) -> Callable[[torch.Generator], dict[str, torch.Tensor]]:
    return lambda g: {"pixel_values": torch.randn(BATCH, 3, size, size, generator=g)}


def waveform(g: torch.Generator) -> dict[str, torch.Tensor]:
    return {"input_values": torch.randn(BATCH, 1600, generator=g)}


CONV_AUDIO = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  conv_dim=(32, 32), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=4, vocab_size=32)
CONV_VISION = dict(num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1])

ZOO: dict[str, ZooModel] = {
    # text encoders
    "bert": ZooModel("text", "encoder", "BertModel", "BertConfig", TEXT, token_ids),
    "roberta": ZooModel("text", "encoder", "RobertaForMaskedLM", "RobertaConfig", dict(TEXT, pad_token_id=1),
                        token_ids),
    "distilbert": ZooModel("text", "encoder", "DistilBertForSequenceClassification", "DistilBertConfig",
                           dict(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                max_position_embeddings=128), token_ids),
    "albert": ZooModel("text", "encoder", "AlbertModel", "AlbertConfig", dict(TEXT, embedding_size=32), token_ids),
    "electra": ZooModel("text", "encoder", "ElectraForTokenClassification", "ElectraConfig",
                        dict(TEXT, embedding_size=32), token_ids),
    "deberta_v2": ZooModel("text", "encoder", "DebertaV2Model", "DebertaV2Config", TEXT, token_ids),
    # decoders (their default config returns a KV cache)
    "gpt2": ZooModel("text", "decoder", "GPT2LMHeadModel", "GPT2Config",
                     dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128), token_ids),
    "llama": ZooModel("text", "decoder", "LlamaForCausalLM", "LlamaConfig", DECODER, token_ids),
    "qwen2": ZooModel("text", "decoder", "Qwen2ForCausalLM", "Qwen2Config", DECODER, token_ids),
    "opt": ZooModel("text", "decoder", "OPTForCausalLM", "OPTConfig",
                    dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         ffn_dim=128, word_embed_proj_dim=64, max_position_embeddings=128, pad_token_id=1),
                    token_ids),
    "gpt_neox": ZooModel("text", "decoder", "GPTNeoXForCausalLM", "GPTNeoXConfig", TEXT, token_ids),
    # encoder-decoders
    "t5": ZooModel("text", "encoder-decoder", "T5ForConditionalGeneration", "T5Config",
                   dict(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                        decoder_start_token_id=0), seq2seq_ids),
    "bart": ZooModel("text", "encoder-decoder", "BartForConditionalGeneration", "BartConfig",
                     dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                          decoder_ffn_dim=128, max_position_embeddings=128), seq2seq_ids),
    # vision
    "vit": ZooModel("vision", "encoder", "ViTForImageClassification", "ViTConfig", VISION, images(32)),
    "deit": ZooModel("vision", "encoder", "DeiTModel", "DeiTConfig", VISION, images(32)),
    "dinov2": ZooModel("vision", "encoder", "Dinov2Model", "Dinov2Config", VISION, images(32)),
    "convnext": ZooModel("vision", "encoder", "ConvNextForImageClassification", "ConvNextConfig", CONV_VISION,
                         images(32)),
    "resnet": ZooModel("vision", "encoder", "ResNetForImageClassification", "ResNetConfig",
                       dict(CONV_VISION, embedding_size=16, layer_type="basic"), images(32)),
    "segformer": ZooModel("vision", "encoder", "SegformerForSemanticSegmentation", "SegformerConfig",
                          dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                               patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                               mlp_ratios=[2, 2], decoder_hidden_size=32), images(32)),
    "swin": ZooModel("vision", "encoder", "SwinModel", "SwinConfig",
                     dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                          window_size=4), images(32)),
    # audio
    "wav2vec2": ZooModel("audio", "encoder", "Wav2Vec2ForCTC", "Wav2Vec2Config", CONV_AUDIO, waveform),
    "hubert": ZooModel("audio", "encoder", "HubertModel", "HubertConfig", CONV_AUDIO, waveform),
    "ast": ZooModel("audio", "encoder", "ASTForAudioClassification", "ASTConfig",
                    dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                         num_mel_bins=16, max_length=32, patch_size=8, frequency_stride=8, time_stride=8),
                    lambda g: {"input_values": torch.randn(BATCH, 32, 16, generator=g)}),
    "whisper": ZooModel("audio", "encoder-decoder", "WhisperForConditionalGeneration", "WhisperConfig",
                        dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                             decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16,
                             max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                             decoder_start_token_id=1, suppress_tokens=None, begin_suppress_tokens=None),
                        lambda g: {"input_features": torch.randn(BATCH, 16, 32, generator=g),
                                   "decoder_input_ids": torch.randint(3, VOCAB, (BATCH, 4), generator=g)}),
}


def build(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The named architecture and its example inputs."""
    return ZOO[name].build()
