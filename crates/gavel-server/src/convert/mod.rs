//! Conversions between the public protobuf messages (`gavel.v1`) and the
//! core's types, one file per message family. Decoding validates what the
//! protobuf types cannot express (unspecified enums, negative timestamps,
//! missing messages) and reports it as `INVALID_ARGUMENT`.

pub mod access;
pub mod approval;
pub mod audit;
pub mod capability;
pub mod common;
pub mod execution;
pub mod policy;
