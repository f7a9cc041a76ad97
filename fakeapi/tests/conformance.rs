//! The conformance suite (`ferrolb_fakeapi::conformance`) against the fake: one test per
//! body, each on a fresh fake. `testbed/tests/conformance_real.rs` runs the same bodies
//! against a real kube-apiserver.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferrolb_fakeapi::conformance::{BODIES, run_on_fake};

macro_rules! on_the_fake {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                run_on_fake(stringify!($name)).await;
            }
        )*

        #[test]
        fn every_body_has_a_test_here() {
            let here = [$(stringify!($name)),*];
            let bodies: Vec<&str> = BODIES.iter().map(|b| b.name).collect();
            assert_eq!(here.as_slice(), bodies.as_slice(), "list every conformance body here, in order");
        }
    };
}

on_the_fake![
    resource_version_increases_on_every_write,
    builtin_kinds_are_served_at_their_real_paths,
    pods_by_node_and_resource_version_guarded_status_patches,
    resource_version_guarded_service_status_and_metadata_patches,
    stale_update_conflicts_and_missing_update_is_not_found,
    create_twice_is_already_exists,
    generate_name_and_missing_namespace,
    status_subresource_is_kept_apart_from_spec,
    lease_concurrent_takeover_conflicts,
    events_can_be_created_in_both_apis,
    server_side_apply_tracks_managers_and_force_wins,
    fields_changed_by_an_update_conflict_with_a_later_apply,
    apply_to_status_touches_only_status,
    apply_removes_fields_its_manager_stopped_setting,
    apply_merges_keyed_lists_element_by_element,
    an_applied_empty_map_stays_owned_after_the_server_drops_it,
    watch_from_a_resource_version_sees_later_events_in_order,
    watch_lines_begin_with_their_type,
    watch_from_a_compacted_resource_version_is_gone,
    bookmarks_arrive,
    label_and_field_selectors_filter_lists_and_watches,
    watcher_relists_after_410,
    reflector_store_follows_the_api,
    kube_runtime_controller_reconciles,
    kube_runtime_finalizer_helper_round_trip,
    owner_reference_garbage_collection,
    finalizers_hold_deletion_until_removed,
    custom_resources_are_served_after_crd_registration,
];
