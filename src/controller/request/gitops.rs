//! What a team's request may do with the GitOps objects managing its workloads, as
//! the cluster's admin allows (`refill controller --request-gitops`). Pure.
//!
//! It limits DataRestoreRequests only: a DataRestore is made in Velero's namespace by
//! whoever may write there, the cluster's admin, who needs no leave from a setting
//! of their own.

use crate::api::{DataRestoreSpec, GitOpsPolicy};

/// What requests may do with the GitOps objects that manage their consumers.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestGitOps {
    /// Requests may ask for any spec.gitOps.policy, Pause (their default) included.
    #[default]
    Pause,
    /// A request asking Pause (or asking nothing) is carried out under Ignore: no
    /// GitOps object is ever paused for a team.
    Ignore,
    /// A request asking Pause (or asking nothing) is refused: the team must choose
    /// Ignore or Refuse itself.
    Refuse,
}

impl RequestGitOps {
    /// As the flag is written.
    fn flag(self) -> &'static str {
        match self {
            RequestGitOps::Pause => "pause",
            RequestGitOps::Ignore => "ignore",
            RequestGitOps::Refuse => "refuse",
        }
    }
}

/// The DataRestore spec of a request, its spec.gitOps.policy limited by `setting`;
/// else why the request is refused.
pub(crate) fn limit(
    mut spec: DataRestoreSpec,
    setting: RequestGitOps,
) -> Result<DataRestoreSpec, String> {
    let asked = spec.git_ops().policy;
    if asked != GitOpsPolicy::Pause {
        return Ok(spec);
    }
    match setting {
        RequestGitOps::Pause => Ok(spec),
        RequestGitOps::Ignore => {
            spec.git_ops.get_or_insert_with(Default::default).policy = GitOpsPolicy::Ignore;
            Ok(spec)
        }
        RequestGitOps::Refuse => Err(format!(
            "spec.gitOps.policy: Pause (the default) is not allowed for requests here (refill controller --request-gitops={}): set it to Ignore (a GitOps sync that scales a consumer back up fails its volumes, safely) or Refuse",
            setting.flag()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::GitOpsSpec;

    fn asking(policy: Option<GitOpsPolicy>) -> DataRestoreSpec {
        DataRestoreSpec {
            git_ops: policy.map(|policy| GitOpsSpec {
                policy,
                argo_cd_namespace: Some("gitops".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_requests_policy_reaches_its_data_restore_within_the_setting() {
        let request = crate::api::DataRestoreRequestSpec {
            backup_name: "nightly".into(),
            git_ops: Some(GitOpsSpec {
                policy: GitOpsPolicy::Refuse,
                ..Default::default()
            }),
            ..Default::default()
        };
        let backed_up = ["team-a".to_string()].into();
        let spec = super::super::decide::data_restore_spec("team-a", &request, &backed_up)
            .and_then(|spec| limit(spec, RequestGitOps::Ignore).map_err(|e| vec![e]))
            .unwrap();
        assert_eq!(spec.git_ops().policy, GitOpsPolicy::Refuse);
        let asked_nothing = crate::api::DataRestoreRequestSpec {
            git_ops: None,
            ..request
        };
        let spec =
            super::super::decide::data_restore_spec("team-a", &asked_nothing, &backed_up).unwrap();
        assert_eq!(spec.git_ops().policy, GitOpsPolicy::Pause, "the default");
    }

    #[test]
    fn pause_lets_every_policy_through() {
        for policy in [
            None,
            Some(GitOpsPolicy::Pause),
            Some(GitOpsPolicy::Ignore),
            Some(GitOpsPolicy::Refuse),
        ] {
            let spec = limit(asking(policy), RequestGitOps::Pause).unwrap();
            assert_eq!(spec.git_ops, asking(policy).git_ops, "{policy:?}");
        }
    }

    #[test]
    fn ignore_turns_pause_into_ignore_and_keeps_the_rest() {
        for policy in [None, Some(GitOpsPolicy::Pause)] {
            let spec = limit(asking(policy), RequestGitOps::Ignore).unwrap();
            assert_eq!(spec.git_ops().policy, GitOpsPolicy::Ignore, "{policy:?}");
        }
        let spec = limit(asking(Some(GitOpsPolicy::Pause)), RequestGitOps::Ignore).unwrap();
        assert_eq!(
            spec.git_ops().argo_cd_namespace(),
            "gitops",
            "only the policy changes"
        );
        let spec = limit(asking(Some(GitOpsPolicy::Refuse)), RequestGitOps::Ignore).unwrap();
        assert_eq!(spec.git_ops().policy, GitOpsPolicy::Refuse);
    }

    #[test]
    fn refuse_refuses_pause_naming_the_field_and_the_setting() {
        for policy in [None, Some(GitOpsPolicy::Pause)] {
            let error = limit(asking(policy), RequestGitOps::Refuse).unwrap_err();
            assert!(error.starts_with("spec.gitOps.policy: "), "{error}");
            assert!(error.contains("--request-gitops=refuse"), "{error}");
        }
        for policy in [GitOpsPolicy::Ignore, GitOpsPolicy::Refuse] {
            let spec = limit(asking(Some(policy)), RequestGitOps::Refuse).unwrap();
            assert_eq!(spec.git_ops().policy, policy);
        }
    }
}
