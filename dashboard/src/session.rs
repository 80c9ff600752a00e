//! The signed-in key. It lives in session storage (gone when the tab closes, never in a URL or
//! in local storage) and its scopes, from `/api/whoami`, decide what the pages offer.

use leptos::prelude::*;

const STORAGE_KEY: &str = "infergate.api_key";

pub use infergate_api_types::keys::Identity;

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.session_storage().ok()?
}

pub fn stored_key() -> Option<String> {
    storage()?.get_item(STORAGE_KEY).ok()?
}

pub fn store_key(key: &str) {
    if let Some(s) = storage() {
        let _ = s.set_item(STORAGE_KEY, key);
    }
}

pub fn forget_key() {
    if let Some(s) = storage() {
        let _ = s.remove_item(STORAGE_KEY);
    }
}

/// Shared by every page through the context.
#[derive(Clone, Copy)]
pub struct Session {
    pub identity: RwSignal<Option<Identity>>,
}

impl Session {
    pub fn can(&self, scope: &str) -> bool {
        self.identity
            .with(|i| i.as_ref().is_some_and(|i| i.can(scope)))
    }

    pub fn sign_out(&self) {
        forget_key();
        self.identity.set(None);
    }
}

pub fn use_session() -> Session {
    expect_context::<Session>()
}
