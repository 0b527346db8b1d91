//! Servers that ctxbench starts itself (`sweep --server-cmd TEMPLATE -L NAME VALUES`): the
//! command template and its grid of variants ([`template`]), and the process that runs one
//! variant on a free port until ctxbench stops it ([`server`]).

pub mod server;
pub mod template;

pub use server::{kill_all, LaunchError, LaunchOptions, ManagedServer, Stopped};
pub use template::{ParameterList, ServerTemplate, TemplateError, Variant};
