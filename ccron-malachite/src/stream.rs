//! Streaming proposal parts: a proposal is one self-contained part followed by the stream's end.

use bytes::Bytes;
use malachitebft_app_channel::app::streaming::{StreamContent, StreamId, StreamMessage};
use malachitebft_app_channel::{Channels, NetworkMsg};

use crate::context::{Ctx, ProposalPart};

/// The stream of `(height, round)`.
pub fn stream_id(height: u64, round: u32) -> StreamId {
    let mut b = height.to_be_bytes().to_vec();
    b.extend_from_slice(&round.to_be_bytes());
    StreamId::new(Bytes::from(b))
}

/// Publishes `part` (its data, then the end of its stream) to the network.
pub async fn publish(channels: &mut Channels<Ctx>, part: &ProposalPart) {
    let round = part.round.as_u32().unwrap_or(0);
    send(channels, part, stream_id(part.height.0, round)).await;
}

/// Publishes `part` under a stream of its own, `(height, round)` and `tag` (a Byzantine
/// strategy's further parts: a second value of one round, a flood).
pub async fn publish_tagged(channels: &mut Channels<Ctx>, part: &ProposalPart, tag: u32) {
    let round = part.round.as_u32().unwrap_or(0);
    let mut id = stream_id(part.height.0, round).to_bytes().to_vec();
    id.extend_from_slice(&tag.to_be_bytes());
    send(channels, part, StreamId::new(Bytes::from(id))).await;
}

async fn send(channels: &mut Channels<Ctx>, part: &ProposalPart, id: StreamId) {
    for msg in [
        StreamMessage::new(id.clone(), 0, StreamContent::Data(part.clone())),
        StreamMessage::new(id, 1, StreamContent::Fin),
    ] {
        if let Err(e) = channels
            .network
            .send(NetworkMsg::PublishProposalPart(msg))
            .await
        {
            tracing::error!(error = %e, "could not publish a proposal part");
        }
    }
}
