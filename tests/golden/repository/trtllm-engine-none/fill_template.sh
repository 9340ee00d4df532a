#!/usr/bin/env bash
# Builds the model repository from the container's own inflight_batcher_llm tree:
#   bash fill_template.sh <new repository dir>     (APP=<dir> for another tree than /app)
set -euo pipefail
APP="${APP:-/app}"
rm -rf "$1" && mkdir -p "$1"
# whole model directories, lib/ of the BLS included
cp -r "$APP"/all_models/inflight_batcher_llm/. "$1"/
for dir in "$1"/*/; do
  case "$(basename "$dir")" in
    tensorrt_llm|preprocessing|postprocessing|ensemble|tensorrt_llm_bls) ;;
    *) echo "fill_template.sh: removing $(basename "$dir") (trtspec does not serve it)"; rm -rf "$dir" ;;
  esac
done
# fill_template.py asserts every key it is given is in the file: pass only the ones there
fill() {
  local file="$1" kv args=()
  shift
  for kv in "$@"; do grep -q "\${${kv%%:*}}" "$file" && args+=("$kv"); done
  [ ${#args[@]} -eq 0 ] || (IFS=,; python3 "$APP"/tools/fill_template.py -i "$file" "${args[*]}")
}
fill "$1"/tensorrt_llm/config.pbtxt 'batch_scheduler_policy:guaranteed_no_evict' 'batching_strategy:inflight_fused_batching' 'cancellation_check_period_ms:100' 'cross_kv_cache_fraction:' 'cuda_graph_cache_size:0' 'cuda_graph_mode:false' 'decoding_mode:top_k_top_p' 'decoupled_mode:true' 'eagle_choices:' 'enable_chunked_context:false' 'enable_context_fmha_fp32_acc:false' 'enable_kv_cache_reuse:true' 'enable_trt_overlap:' 'encoder_engine_dir:' 'encoder_input_features_data_type:TYPE_FP16' 'engine_dir:/engines/tiny/target' 'exclude_input_in_output:true' 'gpu_device_ids:0' 'gpu_weights_percent:' 'guided_decoding_backend:' 'iter_stats_max_iterations:1000' 'kv_cache_free_gpu_mem_fraction:0.9' 'kv_cache_host_memory_bytes:' 'kv_cache_onboard_blocks:' 'logits_datatype:TYPE_FP32' 'lookahead_ngram_size:' 'lookahead_verification_set_size:' 'lookahead_window_size:' 'lora_cache_gpu_memory_fraction:' 'lora_cache_host_memory_bytes:' 'lora_cache_max_adapter_size:' 'lora_cache_optimal_adapter_size:' 'lora_prefetch_dir:' 'max_attention_window_size:' 'max_beam_width:1' 'max_queue_delay_microseconds:0' 'max_queue_size:0' 'max_tokens_in_paged_kv_cache:' 'medusa_choices:' 'multi_block_mode:true' 'normalize_log_probs:true' 'num_nodes:1' 'participant_ids:' 'prompt_embedding_table_data_type:TYPE_FP16' 'request_stats_max_iterations:0' 'sink_token_length:' 'speculative_decoding_fast_logits:false' 'stats_check_period_ms:100' 'tokenizer_dir:/engines/tiny/hf/target' 'triton_backend:tensorrtllm' 'triton_max_batch_size:8' 'xgrammar_tokenizer_info_path:'
fill "$1"/preprocessing/config.pbtxt 'add_special_tokens:false' 'engine_dir:/engines/tiny/target' 'max_num_images:' 'max_queue_delay_microseconds:0' 'max_queue_size:0' 'multimodal_model_path:' 'preprocessing_instance_count:1' 'tokenizer_dir:/engines/tiny/hf/target' 'triton_max_batch_size:8'
fill "$1"/postprocessing/config.pbtxt 'postprocessing_instance_count:1' 'skip_special_tokens:true' 'tokenizer_dir:/engines/tiny/hf/target' 'triton_max_batch_size:8'
fill "$1"/ensemble/config.pbtxt 'logits_datatype:TYPE_FP32' 'triton_max_batch_size:8'
fill "$1"/tensorrt_llm_bls/config.pbtxt 'accumulate_tokens:false' 'bls_instance_count:8' 'decoupled_mode:true' 'logits_datatype:TYPE_FP32' 'multimodal_encoders_name:' 'tensorrt_llm_draft_model_name:' 'tensorrt_llm_model_name:tensorrt_llm' 'triton_max_batch_size:8'
if grep -n '\${' "$1"/*/config.pbtxt; then
  echo "fill_template.sh: placeholders above have no value from trtspec; refusing to start" >&2
  exit 1
fi
