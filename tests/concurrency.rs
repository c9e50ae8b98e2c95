//! Exactly one of many racing consumes (or decides) succeeds, across nodes.

mod support;

use gavel_proto::v1 as pb;
use support::{domain_code, retry, user, Cluster};

async fn create_approval(cluster: &Cluster, via: u64, id: &str) {
    let request = pb::CreateApprovalRequest {
        request_id: format!("create-{id}"),
        id: id.to_string(),
        capability_id: "orders.refund".to_string(),
        surface: "test".to_string(),
        actor: Some(user("alice")),
        input_json: r#"{"order":"o-1","amount":10}"#.to_string(),
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    };
    retry(|| {
        let mut client = cluster.approvals(via);
        let request = request.clone();
        async move { client.create_approval(request).await }
    })
    .await
    .expect("create approval");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_consumes_across_three_nodes_have_exactly_one_winner() {
    let cluster = Cluster::start(3).await;
    create_approval(&cluster, 1, "apr-race").await;
    retry(|| {
        let mut client = cluster.approvals(2);
        let request = pb::DecideApprovalRequest {
            request_id: "decide-race".to_string(),
            id: "apr-race".to_string(),
            status: pb::ApprovalStatus::Approved as i32,
            approver: Some(user("bob")),
            ..pb::DecideApprovalRequest::default()
        };
        async move { client.decide_approval(request).await }
    })
    .await
    .expect("approve");

    let mut handles = Vec::new();
    for i in 0..16u64 {
        let mut client = cluster.approvals(i % 3 + 1);
        handles.push(tokio::spawn(async move {
            let request = pb::ConsumeApprovalRequest {
                request_id: format!("consume-{i}"),
                id: "apr-race".to_string(),
                execution_id: format!("ex-{i}"),
                ..pb::ConsumeApprovalRequest::default()
            };
            client.consume_approval(request).await
        }));
    }
    let mut winners = Vec::new();
    for (i, handle) in handles.into_iter().enumerate() {
        match handle.await.expect("task") {
            Ok(response) => winners.push((i, response.into_inner().approval.expect("approval"))),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::FailedPrecondition, "consume {i}: {status:?}");
                assert_eq!(domain_code(&status), "FAILED_PRECONDITION");
                assert!(status.message().contains("cannot be consumed"), "{}", status.message());
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one consume wins: {winners:?}");
    let (index, approval) = &winners[0];
    assert_eq!(approval.status, pb::ApprovalStatus::Consumed as i32);
    assert_eq!(approval.consumed_by_execution_id.as_deref(), Some(format!("ex-{index}").as_str()));
    cluster.wait_converged().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_decides_across_three_nodes_have_exactly_one_winner() {
    let cluster = Cluster::start(3).await;
    create_approval(&cluster, 3, "apr-decide-race").await;
    let mut handles = Vec::new();
    for i in 0..16u64 {
        let mut client = cluster.approvals(i % 3 + 1);
        handles.push(tokio::spawn(async move {
            let status = if i % 2 == 0 { pb::ApprovalStatus::Approved } else { pb::ApprovalStatus::Rejected };
            let request = pb::DecideApprovalRequest {
                request_id: format!("decide-{i}"),
                id: "apr-decide-race".to_string(),
                status: status as i32,
                approver: Some(user(&format!("approver-{i}"))),
                ..pb::DecideApprovalRequest::default()
            };
            client.decide_approval(request).await
        }));
    }
    let mut winners = 0;
    for handle in handles {
        match handle.await.expect("task") {
            Ok(_) => winners += 1,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
                assert!(status.message().contains("is not pending"), "{}", status.message());
            }
        }
    }
    assert_eq!(winners, 1, "exactly one decide wins");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_consumes_through_a_leader_sigkill_still_have_exactly_one_winner_per_approval() {
    let mut cluster = Cluster::start(3).await;
    let approvals: Vec<String> = (0..8).map(|i| format!("apr-kill-{i}")).collect();
    for id in &approvals {
        create_approval(&cluster, 1, id).await;
        retry(|| {
            let mut client = cluster.approvals(2);
            let request = pb::DecideApprovalRequest {
                request_id: format!("decide-{id}"),
                id: id.clone(),
                status: pb::ApprovalStatus::Approved as i32,
                approver: Some(user("bob")),
                ..pb::DecideApprovalRequest::default()
            };
            async move { client.decide_approval(request).await }
        })
        .await
        .expect("approve");
    }
    let addrs: Vec<String> = cluster.running().into_iter().map(|id| cluster.addr(id)).collect();
    let leader = cluster.wait_for_leader().await;

    // Four consumers per approval, each starting at a different node; the SDK
    // retries UNAVAILABLE and broken connections with the consumer's own request id.
    let mut handles = Vec::new();
    for (index, id) in approvals.iter().enumerate() {
        for consumer in 0..4usize {
            let mut endpoints = addrs.clone();
            endpoints.rotate_left((index + consumer) % addrs.len());
            let client = gavel_client::Client::new(&endpoints).expect("client");
            let id = id.clone();
            handles.push(tokio::spawn(async move {
                // Spread the consumers over the moment of the kill.
                tokio::time::sleep(std::time::Duration::from_millis(40 * (index as u64))).await;
                let execution_id = format!("ex-{id}-{consumer}");
                let request = pb::ConsumeApprovalRequest {
                    request_id: format!("consume-{id}-{consumer}"),
                    id: id.clone(),
                    execution_id: execution_id.clone(),
                    ..pb::ConsumeApprovalRequest::default()
                };
                (id, execution_id, client.consume_approval(request).await)
            }));
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    cluster.kill(leader);

    let mut winners: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for handle in handles {
        let (id, execution_id, outcome) = handle.await.expect("task");
        match outcome {
            Ok(_) => winners.entry(id).or_default().push(execution_id),
            Err(error) => assert_eq!(error.code(), "FAILED_PRECONDITION", "{id}/{execution_id}: {error:?}"),
        }
    }
    let survivor = cluster.wait_for_leader().await;
    for id in &approvals {
        let won = winners.get(id).cloned().unwrap_or_default();
        assert_eq!(won.len(), 1, "{id}: exactly one consumer wins across the leader change: {won:?}");
        let approval = retry(|| {
            let mut client = cluster.approvals(survivor);
            let request = pb::GetApprovalRequest { id: id.clone(), ..pb::GetApprovalRequest::default() };
            async move { client.get_approval(request).await }
        })
        .await
        .expect("get")
        .into_inner()
        .approval
        .expect("approval");
        assert_eq!(approval.consumed_by_execution_id.as_deref(), Some(won[0].as_str()), "{id}: the winner is recorded");
    }
}
