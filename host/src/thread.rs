//! A session's thread as one run sees it (see [`crate::session`]).

use std::sync::{Arc, Mutex, MutexGuard};

use nexo_model::Message;
use nexo_store::{Store, StoreError, ThreadAppend};

/// A session's thread as one run sees it: what the store held when the run
/// started, and what its prompts have added since.
#[derive(Debug)]
pub struct Thread {
    session: String,
    /// How many of the messages the store held when the run started.
    stored: usize,
    /// The thread: the stored messages, then this run's exchanges. Shared
    /// with every request without a copy; appended to in place once the
    /// prompt that read it is over, so a long conversation is not copied
    /// every prompt.
    messages: Mutex<Arc<Vec<Message>>>,
}

impl Thread {
    /// The thread of session `session`, holding `history`.
    pub fn new(session: impl Into<String>, history: Vec<Message>) -> Thread {
        Thread { session: session.into(), stored: history.len(), messages: Mutex::new(Arc::new(history)) }
    }

    /// Loads session `id`'s thread from `store`. A stored message this
    /// build cannot read is [`StoreError::Corrupt`], naming it.
    pub async fn load(store: &dyn Store, id: &str) -> Result<Arc<Thread>, StoreError> {
        let stored = store.thread(id).await?;
        let mut history = Vec::with_capacity(stored.len());
        for (i, value) in stored.into_iter().enumerate() {
            let message = serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
                location: store.location(),
                reason: format!("message {i} of session `{id}`'s thread cannot be read: {e}"),
            })?;
            history.push(message);
        }
        Ok(Arc::new(Thread::new(id, history)))
    }

    /// The session's id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The conversation so far: the stored thread, then this run's
    /// exchanges. No message is copied.
    pub fn history(&self) -> Arc<Vec<Message>> {
        self.lock().clone()
    }

    /// How many messages the thread holds now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the thread is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a prompt's exchange from its `transcript`: everything after the
    /// instructions (a loop's transcript does not repeat the history).
    pub fn remember(&self, transcript: &[Message]) {
        let new = transcript.iter().skip_while(|m| matches!(m, Message::System { .. })).cloned();
        // In place unless a prompt still holds the history (then a copy, as before).
        Arc::make_mut(&mut *self.lock()).extend(new);
    }

    /// What this run added, for the batch that ends it; `None` when it
    /// added nothing.
    pub fn append(&self) -> Option<ThreadAppend> {
        let messages = self.lock();
        let added = &messages[self.stored..];
        if added.is_empty() {
            return None;
        }
        Some(ThreadAppend {
            session: self.session.clone(),
            expected: self.stored as u64,
            messages: added.iter().filter_map(|m| serde_json::to_value(m).ok()).collect(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Arc<Vec<Message>>> {
        self.messages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Message {
        Message::User { text: text.into() }
    }

    fn answer(text: &str) -> Message {
        Message::Assistant { text: text.into(), tool_calls: Vec::new() }
    }

    #[test]
    fn a_prompt_adds_only_its_exchange_and_never_the_instructions() {
        let thread = Thread::new("s1", vec![user("hi"), answer("hello")]);
        let system = Message::System { text: "be brief".into() };
        thread.remember(&[system.clone(), user("again"), answer("yes")]);
        thread.remember(&[system, user("3"), answer("c")]);
        let append = thread.append().expect("two exchanges were added");
        assert_eq!(append.expected, 2);
        assert_eq!(append.messages.len(), 4);
        assert_eq!(append.messages[0]["role"], "user");
        assert!(thread.history().iter().all(|m| !matches!(m, Message::System { .. })));
    }

    #[test]
    fn history_is_shared_and_a_held_history_keeps_what_it_saw() {
        let thread = Thread::new("s1", vec![user("hi"), answer("hello")]);
        let first = thread.history();
        assert!(Arc::ptr_eq(&first, &thread.history()), "reading the history copies nothing");
        thread.remember(&[user("again"), answer("yes")]);
        assert_eq!(first.len(), 2, "a history already handed out does not change");
        drop(first);
        let before = Arc::as_ptr(&thread.history());
        thread.remember(&[user("3"), answer("c")]);
        assert_eq!(thread.len(), 6);
        assert_eq!(thread.history()[4], user("3"));
        assert_eq!(thread.append().unwrap().messages.len(), 4);
        // Nothing held it, so the exchange went in place.
        assert_eq!(Arc::as_ptr(&thread.history()), before);
    }

    #[test]
    fn a_run_that_added_nothing_appends_nothing() {
        assert!(Thread::new("s1", vec![user("hi")]).append().is_none());
    }
}
