//! Workspaces and agents in the metadata store, one contract for both backends.

use spool_chat::{
    metadata::Workspaces,
    workspace::{Agent, Runtime, Workspace},
};
use spool_log::error::Error;
use spool_tests::{Harness, unique_id};

fn workspace(id: &str, created_ms: i64) -> Workspace {
    // Settings other than the defaults, so a store that dropped them would be seen.
    let mut ws = Workspace::new(id.to_owned(), format!("Workspace {id}"), created_ms);
    ws.description = "for tests".to_owned();
    ws.cleanup.chat_folder_days = 30;
    ws.notifications.email = Some("ops@example.com".to_owned());
    ws.notifications.on_task = false;
    ws
}

fn agent(id: &str, ws: &str, position: u32) -> Agent {
    Agent {
        id: id.to_owned(),
        workspace_id: ws.to_owned(),
        name: format!("Agent {id}"),
        instruction: "help".to_owned(),
        runtime: Some(Runtime::Scripted),
        model: None,
        cli_type: None,
        context_tokens: None,
        position,
        builtin: false,
        created_ms: 1,
        updated_ms: 1,
    }
}

fn ids(agents: &[Agent]) -> Vec<&str> {
    agents.iter().map(|a| a.id.as_str()).collect()
}

/// A workspace is made with its built-in agent, listed, changed and deleted with its agents,
/// and another organization sees none of it.
pub(crate) async fn workspaces_live_and_die_with_their_agents<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, other) = (unique_id("org"), unique_id("org"));
    let (ws1, ws2) = (unique_id("ws"), unique_id("ws"));
    let builtin = Agent::builtin(unique_id("ag"), ws1.clone(), 10);

    // WHEN two workspaces are made
    a.create_workspace(&org, &workspace(&ws1, 10), &builtin).await.unwrap();
    a.create_workspace(
        &org,
        &workspace(&ws2, 20),
        &Agent::builtin(unique_id("ag"), ws2.clone(), 20),
    )
    .await
    .unwrap();
    // THEN another instance lists them oldest first, each with its built-in agent
    let list = b.workspaces(&org).await.unwrap();
    assert_eq!(list.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), [&ws1, &ws2]);
    assert_eq!(b.agents(&org, &ws1).await.unwrap(), vec![builtin.clone()]);
    assert_eq!(b.agent(&org, &builtin.id).await.unwrap(), Some(builtin.clone()));
    // AND the same id cannot be made twice
    assert!(matches!(
        b.create_workspace(
            &org,
            &workspace(&ws1, 30),
            &Agent::builtin(unique_id("ag"), ws1.clone(), 30)
        )
        .await,
        Err(Error::Exists { .. })
    ));
    // AND another organization finds nothing, even by id
    assert!(b.workspaces(&other).await.unwrap().is_empty());
    assert_eq!(b.workspace(&other, &ws1).await.unwrap(), None);
    assert_eq!(b.agent(&other, &builtin.id).await.unwrap(), None);
    assert!(b.agents(&other, &ws1).await.unwrap().is_empty());
    let mut stolen = workspace(&ws1, 10);
    stolen.name = "stolen".to_owned();
    assert!(matches!(
        b.update_workspace(&other, &stolen).await,
        Err(Error::Missing { .. })
    ));
    assert!(matches!(
        b.delete_workspace(&other, &ws1).await,
        Err(Error::Missing { .. })
    ));

    // WHEN a workspace is renamed
    let mut renamed = workspace(&ws1, 10);
    renamed.name = "Renamed".to_owned();
    renamed.working_dir = Some("/srv/project".to_owned());
    a.update_workspace(&org, &renamed).await.unwrap();
    // THEN every instance reads the new fields
    assert_eq!(b.workspace(&org, &ws1).await.unwrap(), Some(renamed));

    // WHEN it is deleted
    b.delete_workspace(&org, &ws1).await.unwrap();
    // THEN it and its agents are gone, and the other workspace is untouched
    assert_eq!(a.workspace(&org, &ws1).await.unwrap(), None);
    assert_eq!(a.agent(&org, &builtin.id).await.unwrap(), None);
    assert!(a.agents(&org, &ws1).await.unwrap().is_empty());
    assert_eq!(a.workspaces(&org).await.unwrap().len(), 1);
    assert!(matches!(
        a.delete_workspace(&org, &ws1).await,
        Err(Error::Missing { .. })
    ));
    assert!(matches!(
        a.update_workspace(&org, &workspace(&ws1, 10)).await,
        Err(Error::Missing { .. })
    ));
}

/// Agents are made in existing workspaces, listed by position, changed, reordered and deleted.
pub(crate) async fn agents_are_ordered_changed_and_deleted<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let org = unique_id("org");
    let ws = unique_id("ws");
    let builtin = Agent::builtin(unique_id("ag"), ws.clone(), 1);

    // GIVEN no workspace: an agent for it is refused
    let (x, y, z) = (unique_id("ag"), unique_id("ag"), unique_id("ag"));
    assert!(matches!(
        a.create_agent(&org, &agent(&x, &ws, 1)).await,
        Err(Error::Missing { .. })
    ));
    assert_eq!(b.agent(&org, &x).await.unwrap(), None);

    // WHEN the workspace exists and three agents are added
    a.create_workspace(&org, &workspace(&ws, 1), &builtin).await.unwrap();
    for (id, position) in [(&x, 1), (&y, 2), (&z, 3)] {
        a.create_agent(&org, &agent(id, &ws, position)).await.unwrap();
    }
    // THEN they are listed by position after the built-in agent
    assert_eq!(ids(&b.agents(&org, &ws).await.unwrap()), [&builtin.id, &x, &y, &z]);
    assert!(matches!(
        a.create_agent(&org, &agent(&x, &ws, 9)).await,
        Err(Error::Exists { .. })
    ));

    // WHEN one is changed
    let mut changed = agent(&y, &ws, 2);
    changed.name = "Reviewer".to_owned();
    changed.model = Some("gpt-4.1-mini".to_owned());
    changed.runtime = Some(Runtime::Openai);
    a.update_agent(&org, &changed).await.unwrap();
    assert_eq!(b.agent(&org, &y).await.unwrap(), Some(changed.clone()));

    // WHEN they are reordered: z, built-in, y, x
    a.set_positions(&org, &ws, &[(z.clone(), 0), (builtin.id.clone(), 1), (x.clone(), 3)])
        .await
        .unwrap();
    // THEN every instance lists the new order, and the other fields are kept
    let listed = b.agents(&org, &ws).await.unwrap();
    assert_eq!(ids(&listed), [&z, &builtin.id, &y, &x]);
    assert_eq!(listed[2].name, "Reviewer");
    assert_eq!(b.agent(&org, &z).await.unwrap().unwrap().position, 0);
    // AND a reorder naming an agent that is not there changes nothing
    assert!(matches!(
        a.set_positions(&org, &ws, &[(x.clone(), 0), (unique_id("ag"), 1)])
            .await,
        Err(Error::Missing { .. })
    ));
    assert_eq!(ids(&b.agents(&org, &ws).await.unwrap()), [&z, &builtin.id, &y, &x]);

    // WHEN one is deleted
    a.delete_agent(&org, &x).await.unwrap();
    // THEN it is gone everywhere, and deleting it again is refused
    assert_eq!(b.agent(&org, &x).await.unwrap(), None);
    assert_eq!(ids(&b.agents(&org, &ws).await.unwrap()), [&z, &builtin.id, &y]);
    assert!(matches!(a.delete_agent(&org, &x).await, Err(Error::Missing { .. })));
    assert!(matches!(
        a.update_agent(&org, &agent(&x, &ws, 1)).await,
        Err(Error::Missing { .. })
    ));
    // AND another organization cannot touch the rest
    let other = unique_id("org");
    assert!(matches!(b.delete_agent(&other, &y).await, Err(Error::Missing { .. })));
    assert!(matches!(
        b.update_agent(&other, &changed).await,
        Err(Error::Missing { .. })
    ));
    assert_eq!(a.agent(&org, &y).await.unwrap(), Some(changed));
}

/// Commands are stored per organization and scope, replaced by name, and go with their
/// workspace; another organization sees none of them.
pub(crate) async fn slash_commands_are_stored_per_scope<H: Harness>(harness: &H) {
    use spool_commands::{CommandScope, Commands, StoredCommand};
    let store = harness.metadata().await;
    let (org, other) = (unique_id("org"), unique_id("org"));
    let ws = unique_id("ws");
    store
        .create_workspace(&org, &workspace(&ws, 1), &agent(&unique_id("ag"), &ws, 0))
        .await
        .unwrap();
    let scope = CommandScope::Workspace(ws.clone());
    let command = |name: &str, md: &str, at: i64| StoredCommand {
        name: name.to_owned(),
        markdown: md.to_owned(),
        updated_ms: at,
    };
    store
        .put_command(&org, &CommandScope::Global, &command("review", "Global", 1))
        .await
        .unwrap();
    store
        .put_command(&org, &scope, &command("review", "Mine", 2))
        .await
        .unwrap();
    store
        .put_command(&org, &scope, &command("git:commit", "Commit", 3))
        .await
        .unwrap();
    store
        .put_command(&org, &scope, &command("review", "Mine, again", 4))
        .await
        .unwrap();
    let listed = store.commands(&org, &scope).await.unwrap();
    assert_eq!(
        listed,
        [command("git:commit", "Commit", 3), command("review", "Mine, again", 4)],
        "by name, the newest markdown"
    );
    assert_eq!(
        store.command(&org, &CommandScope::Global, "review").await.unwrap(),
        Some(command("review", "Global", 1))
    );
    // Another organization sees and deletes nothing.
    assert!(store.commands(&other, &CommandScope::Global).await.unwrap().is_empty());
    assert!(store.commands(&other, &scope).await.unwrap().is_empty());
    assert!(
        !store
            .delete_command(&other, &CommandScope::Global, "review")
            .await
            .unwrap()
    );
    assert!(
        store
            .delete_command(&org, &CommandScope::Global, "review")
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete_command(&org, &CommandScope::Global, "review")
            .await
            .unwrap()
    );
    assert_eq!(
        store.command(&org, &CommandScope::Global, "review").await.unwrap(),
        None
    );
    // The workspace's commands go with it.
    store.delete_workspace(&org, &ws).await.unwrap();
    assert!(store.commands(&org, &scope).await.unwrap().is_empty());
}

/// The context file lists every agent of the workspace in order, each as `N. Name (id: ag_…)`
/// with its settings and its full instruction, so the built-in agent can tune them (the third
/// source design, questions 8 and 27); an instruction past the context's budget is said to be
/// left out.
pub(crate) async fn the_context_lists_every_agent_with_its_instruction<H: Harness>(harness: &H) {
    let store = harness.metadata().await;
    let (org, ws) = (unique_id("org"), unique_id("ws"));
    let builtin = Agent::builtin(unique_id("ag"), ws.clone(), 1);
    store
        .create_workspace(&org, &workspace(&ws, 1), &builtin)
        .await
        .unwrap();
    // GIVEN three agents after the built-in one, one with a fenced block in its instruction
    let mut made = Vec::new();
    for (position, (name, instruction)) in [
        ("Planner", "Plan the work in steps.\nNever skip a step."),
        ("Writer", "Write it.\n```\nkeep this fence\n```"),
        ("Reviewer", "Review what the Writer wrote."),
    ]
    .into_iter()
    .enumerate()
    {
        let mut a = agent(&unique_id("ag"), &ws, position as u32 + 1);
        a.name = name.to_owned();
        a.instruction = instruction.to_owned();
        store.create_agent(&org, &a).await.unwrap();
        made.push(a);
    }
    let written = || async {
        spool_agents::context::workspace_context(
            &store,
            &spool_chat::notifier::LogNotifier,
            &org,
            &ws,
            &Default::default(),
        )
        .await
        .unwrap()
    };
    // WHEN the context is written
    let context = written().await;
    // THEN each agent is there in order, with its id, its runtime and its whole instruction
    let mut from = context.find(&format!("1. Spool (id: {})", builtin.id)).expect(&context);
    for (i, a) in made.iter().enumerate() {
        let heading = format!("## {}. {} (id: {})", i + 2, a.name, a.id);
        let at = context[from..].find(&heading).map(|at| at + from).expect(&context);
        let section = &context[at..];
        assert!(section.contains("- settings: runtime scripted"), "{context}");
        assert!(section.contains(&a.instruction), "{context}");
        from = at;
    }
    // AND an instruction's own fence does not close the block it is in
    assert!(context.contains("````\nWrite it."), "{context}");

    // GIVEN instructions past the context's budget (100 agents may hold 20,000 characters each)
    let budget = spool_agents::context::INSTRUCTIONS_BUDGET_CHARS;
    let long = spool_chat::workspace::MAX_TEXT_CHARS;
    for n in 0..budget / long + 1 {
        let mut a = agent(&unique_id("ag"), &ws, 10 + n as u32);
        a.instruction = "x".repeat(long);
        store.create_agent(&org, &a).await.unwrap();
    }
    let context = written().await;
    // THEN it stays bounded, and says which instruction it left out
    assert!(context.len() < budget + 20_000, "{}", context.len());
    assert!(context.contains("left out (20000 characters)"), "{context}");
}

on_both_backends!(workspaces:
    workspaces_live_and_die_with_their_agents,
    agents_are_ordered_changed_and_deleted,
    slash_commands_are_stored_per_scope,
    the_context_lists_every_agent_with_its_instruction,
);
