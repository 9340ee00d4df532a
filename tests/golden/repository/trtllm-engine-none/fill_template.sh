#!/usr/bin/env bash
# Re-fill the container's own templates with the values trtspec rendered (optional):
#   bash fill_template.sh <new repository dir>
set -euo pipefail
cp -r /app/all_models/inflight_batcher_llm/. "$1"/
python3 /app/tools/fill_template.py -i "$1"/tensorrt_llm/config.pbtxt 'triton_backend:tensorrtllm,triton_max_batch_size:8,decoupled_mode:true,engine_dir:/engines/tiny/target,batching_strategy:inflight_fused_batching,max_queue_size:0,max_queue_delay_microseconds:0,logits_datatype:TYPE_FP32,tokenizer_dir:/engines/tiny/hf/target,max_beam_width:1,encoder_input_features_data_type:TYPE_FP16,batch_scheduler_policy:guaranteed_no_evict,kv_cache_free_gpu_mem_fraction:0.9,enable_kv_cache_reuse:true,enable_chunked_context:false,normalize_log_probs:true,exclude_input_in_output:true,cancellation_check_period_ms:100,stats_check_period_ms:100,iter_stats_max_iterations:1000,request_stats_max_iterations:0,decoding_mode:top_k_top_p,multi_block_mode:true,enable_context_fmha_fp32_acc:false,cuda_graph_mode:false,cuda_graph_cache_size:0,speculative_decoding_fast_logits:false,gpu_device_ids:0,num_nodes:1'
python3 /app/tools/fill_template.py -i "$1"/preprocessing/config.pbtxt 'triton_max_batch_size:8,tokenizer_dir:/engines/tiny/hf/target,add_special_tokens:false,preprocessing_instance_count:1,engine_dir:/engines/tiny/target,max_queue_delay_microseconds:0,max_queue_size:0'
python3 /app/tools/fill_template.py -i "$1"/postprocessing/config.pbtxt 'triton_max_batch_size:8,tokenizer_dir:/engines/tiny/hf/target,skip_special_tokens:true,postprocessing_instance_count:1'
python3 /app/tools/fill_template.py -i "$1"/ensemble/config.pbtxt 'triton_max_batch_size:8,logits_datatype:TYPE_FP32'
