//! The codec of every generated client and server: prost's encoding, with
//! a smaller first buffer per call than tonic's default.
//!
//! tonic starts each call's encode buffer (and each response stream's decode
//! buffer) at 8 KiB. Almost every Gavel message is a few hundred bytes, and
//! glibc serves an 8 KiB request from its general bins rather than its
//! per-thread cache (which holds chunks up to 1,032 bytes): a profile of the
//! leader at 64 clients put 1 % of its samples in `malloc` under tonic's
//! `EncodedBytes::new` alone. The buffers start at 1 KiB here and grow as a
//! larger message needs (inputs and outputs are up to hundreds of KiB).

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// The first size of a call's encode and decode buffers.
pub const BUFFER_BYTES: usize = 1024;

/// How much a stream encodes before it yields (tonic's default, 32 KiB).
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// prost's codec with [`BUFFER_BYTES`] buffers (named by the code generator's
/// `codec_path`).
#[derive(Debug, Clone)]
pub struct GavelCodec<T, U> {
    types: PhantomData<(T, U)>,
}

impl<T, U> Default for GavelCodec<T, U> {
    fn default() -> Self {
        GavelCodec { types: PhantomData }
    }
}

/// The buffer settings of every call.
pub fn buffer_settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> Codec for GavelCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        ProstCodec::<T, U>::raw_encoder(buffer_settings())
    }

    fn decoder(&mut self) -> ProstDecoder<U> {
        ProstCodec::<T, U>::raw_decoder(buffer_settings())
    }
}

#[cfg(test)]
mod tests {
    use tonic::codec::{Codec, Decoder, Encoder};

    use super::GavelCodec;
    use crate::v1::{GetApprovalRequest, GetApprovalResponse};

    #[test]
    fn every_call_starts_with_one_kib_buffers() {
        let mut codec = GavelCodec::<GetApprovalRequest, GetApprovalResponse>::default();
        let expected = "BufferSettings { buffer_size: 1024, yield_threshold: 32768 }";
        assert_eq!(format!("{:?}", codec.encoder().buffer_settings()), expected);
        assert_eq!(format!("{:?}", codec.decoder().buffer_settings()), expected);
    }
}
