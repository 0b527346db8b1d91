//! Every integration test in one binary: one link of tokio, reqwest and axum instead of
//! one per file. Each module is one former test file; `docs/promises.md` names the module of
//! each test. Tests that drive a server through the reference llama-server or a scripted
//! one run in `cargo test`; the `real_*` modules need the `real-servers` feature and the
//! servers `scripts/test-real-servers` sets up.

mod common;
mod scripted;

mod architecture;
mod campaign_llamacpp;
mod capacity_llamacpp;
mod cli;
mod design_llamacpp;
mod efficiency;
mod faults_llamacpp;
mod faults_scripted;
mod first_contact_scripted;
mod fleet_llamacpp;
mod fork_scripted;
mod golden;
mod idle_llamacpp;
mod idle_scripted;
mod import_tools;
mod integrity_llamacpp;
mod launch_llamacpp;
mod llamacpp_features;
mod promises;
mod promises_llamacpp;
mod prompts_llamacpp;
mod protocol_ollama;
mod protocol_openai_calibrated;
mod protocol_openai_chat;
mod protocol_openai_strict;
mod protocol_sglang;
mod protocol_tgi;
mod protocol_vllm;
mod quantile_llamacpp;
mod real_model_llamacpp;
mod replay_compare_llamacpp;
mod replay_fleet_llamacpp;
mod replay_llamacpp;
mod replay_trace;
mod report;
mod retention_grid_llamacpp;
mod retention_llamacpp;
mod roofline;
mod roofline_llamacpp;
mod scripted_fidelity;
mod spec_dflash_llamacpp;
mod spec_position_llamacpp;
mod spec_real_pair_llamacpp;
mod spec_schedule_llamacpp;
mod spec_window_llamacpp;
mod speculation_llamacpp;
mod sweep_llamacpp;
mod timeout_idle_scripted;
mod tls;
mod warm_compare_llamacpp;
mod warm_llamacpp;
mod wheel;

#[cfg(feature = "real-servers")]
mod real_dynamo;
#[cfg(feature = "real-servers")]
mod real_fastchat;
#[cfg(feature = "real-servers")]
mod real_litellm;
#[cfg(feature = "real-servers")]
mod real_llama_cpp_python;
#[cfg(feature = "real-servers")]
mod real_model_text_servers;
#[cfg(feature = "real-servers")]
mod real_openai_text;
#[cfg(feature = "real-servers")]
mod real_replay;
#[cfg(feature = "real-servers")]
mod real_retention;
#[cfg(feature = "real-servers")]
mod real_sglang;
#[cfg(feature = "real-servers")]
mod real_tools;
#[cfg(feature = "real-servers")]
mod real_transformers;
#[cfg(feature = "real-servers")]
mod real_vllm;
#[cfg(feature = "real-servers")]
mod real_vllm_idle;
#[cfg(feature = "real-servers")]
mod real_vllm_prompts;
#[cfg(feature = "real-servers")]
mod real_warm;
