//! Gavel's public gRPC API, package `gavel.v1`, as generated Rust code.
//!
//! This crate is the wire contract shared by the server, the client and
//! worker SDK, and the CLI. It holds the messages and the tonic clients and
//! servers of every service, generated at build time from `proto/gavel/v1`
//! without a system `protoc`, plus the helpers that put Gavel's stable domain
//! error codes into a `tonic::Status` and read them back.
//!
//! It must not depend on openraft, sled or gavel-core: clients pull it in, and
//! a worker written against the SDK stays small. Conversions between these
//! messages and the domain types live next to the domain types' users (the
//! server), not here.
//!
//! Key items:
//! - [`v1`]: the messages and enums, and for each service a `*_client` and a
//!   `*_server` module (for example [`v1::approval_service_client`]).
//! - [`error_detail`]: [`error_detail::domain_status`] and
//!   [`error_detail::read_error_detail`].
//! - [`metadata`]: the metadata keys (`gavel-leader`, `gavel-forwarded`,
//!   `gavel-request-id`) the server and the SDK share.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for gRPC reflection.
//!
//! The API conventions (units, JSON fields, idempotency tokens, error codes)
//! are described in `docs/api.md`.

pub mod error_detail;
pub mod metadata;

/// Generated code of package `gavel.v1`; its documentation comes from the
/// comments in the proto files.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("gavel.v1");
}

/// The encoded `google.protobuf.FileDescriptorSet` of every `gavel.v1` file,
/// with comments, for registering with a gRPC reflection service.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gavel_descriptor.bin"));

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use prost::Message;
    use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

    use super::FILE_DESCRIPTOR_SET;

    // Field numbers of descriptor.proto, which make up SourceCodeInfo paths.
    const FILE_MESSAGE_TYPE: i32 = 4;
    const FILE_ENUM_TYPE: i32 = 5;
    const FILE_SERVICE: i32 = 6;
    const MESSAGE_FIELD: i32 = 2;
    const MESSAGE_NESTED_TYPE: i32 = 3;
    const MESSAGE_ENUM_TYPE: i32 = 4;
    const MESSAGE_ONEOF: i32 = 8;
    const ENUM_VALUE: i32 = 2;
    const SERVICE_METHOD: i32 = 2;

    fn descriptor_set() -> FileDescriptorSet {
        FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("the embedded descriptor set decodes")
    }

    fn index(position: usize) -> i32 {
        i32::try_from(position).expect("descriptor lists are small")
    }

    /// Records the path and name of an enum and of each of its values.
    fn enum_elements(path: Vec<i32>, name: &str, descriptor: &EnumDescriptorProto, out: &mut Vec<(Vec<i32>, String)>) {
        for (position, value) in descriptor.value.iter().enumerate() {
            let mut value_path = path.clone();
            value_path.extend([ENUM_VALUE, index(position)]);
            out.push((value_path, format!("{name}.{}", value.name())));
        }
        out.push((path, name.to_owned()));
    }

    /// Records the path and name of a message and of everything inside it.
    fn message_elements(path: Vec<i32>, name: &str, descriptor: &DescriptorProto, out: &mut Vec<(Vec<i32>, String)>) {
        for (position, field) in descriptor.field.iter().enumerate() {
            // proto3 `optional` creates a synthetic oneof named after the
            // field; only real oneofs are checked below.
            let mut field_path = path.clone();
            field_path.extend([MESSAGE_FIELD, index(position)]);
            out.push((field_path, format!("{name}.{}", field.name())));
        }
        for (position, oneof) in descriptor.oneof_decl.iter().enumerate() {
            let synthetic = descriptor
                .field
                .iter()
                .any(|field| field.proto3_optional() && field.oneof_index == Some(index(position)));
            if !synthetic {
                let mut oneof_path = path.clone();
                oneof_path.extend([MESSAGE_ONEOF, index(position)]);
                out.push((oneof_path, format!("{name}.{}", oneof.name())));
            }
        }
        for (position, nested) in descriptor.nested_type.iter().enumerate() {
            // A map field's entry message is synthesized by the compiler and
            // has no source to comment; the map field itself is checked.
            if nested.options.as_ref().is_some_and(|options| options.map_entry()) {
                continue;
            }
            let mut nested_path = path.clone();
            nested_path.extend([MESSAGE_NESTED_TYPE, index(position)]);
            let nested_name = format!("{name}.{}", nested.name());
            message_elements(nested_path, &nested_name, nested, out);
        }
        for (position, nested) in descriptor.enum_type.iter().enumerate() {
            let mut nested_path = path.clone();
            nested_path.extend([MESSAGE_ENUM_TYPE, index(position)]);
            let nested_name = format!("{name}.{}", nested.name());
            enum_elements(nested_path, &nested_name, nested, out);
        }
        out.push((path, name.to_owned()));
    }

    #[test]
    fn descriptor_set_holds_every_gavel_file_and_service() {
        let set = descriptor_set();
        let files: HashSet<&str> = set.file.iter().map(|file| file.name()).collect();
        for name in
            ["common", "error", "approval", "capability", "execution", "worker", "audit", "cluster", "access", "policy"]
        {
            assert!(files.contains(format!("gavel/v1/{name}.proto").as_str()), "{name}.proto");
        }
        let services: HashSet<&str> =
            set.file.iter().flat_map(|file| file.service.iter().map(|service| service.name())).collect();
        assert_eq!(
            services,
            HashSet::from([
                "ApprovalService",
                "CapabilityService",
                "ExecutionService",
                "WorkerService",
                "AuditService",
                "ClusterService",
                "AccessService",
                "PolicyService",
            ])
        );
    }

    #[test]
    fn every_message_field_enum_value_and_rpc_has_a_comment() {
        let mut missing = Vec::new();
        for file in descriptor_set().file {
            let commented: HashSet<Vec<i32>> = file
                .source_code_info
                .iter()
                .flat_map(|info| info.location.iter())
                .filter(|location| {
                    !location.leading_comments().trim().is_empty() || !location.trailing_comments().trim().is_empty()
                })
                .map(|location| location.path.clone())
                .collect();

            let mut elements = Vec::new();
            for (position, message) in file.message_type.iter().enumerate() {
                let path = vec![FILE_MESSAGE_TYPE, index(position)];
                message_elements(path, message.name(), message, &mut elements);
            }
            for (position, descriptor) in file.enum_type.iter().enumerate() {
                let path = vec![FILE_ENUM_TYPE, index(position)];
                enum_elements(path, descriptor.name(), descriptor, &mut elements);
            }
            for (position, service) in file.service.iter().enumerate() {
                for (method_position, method) in service.method.iter().enumerate() {
                    let path = vec![FILE_SERVICE, index(position), SERVICE_METHOD, index(method_position)];
                    elements.push((path, format!("{}.{}", service.name(), method.name())));
                }
                elements.push((vec![FILE_SERVICE, index(position)], service.name().to_owned()));
            }

            missing.extend(
                elements
                    .into_iter()
                    .filter(|(path, _)| !commented.contains(path))
                    .map(|(_, name)| format!("{}: {name}", file.name())),
            );
        }
        assert!(missing.is_empty(), "elements without a comment: {missing:#?}");
    }
}
