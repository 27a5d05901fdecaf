//! What the tests of the controller's requests share: a scripted API server and the
//! objects they start from.

pub mod api_mock;
pub mod fixtures;
