//! One e-mail, one organisation. A sign-in provider that names no organisation finds the user by
//! the e-mail address it vouches for, so an organisation that could give itself another's
//! address would take that user's sign-in away (the provider refuses an address two
//! organisations hold). Every path by which an organisation makes a user refuses an address
//! another organisation's user holds, compared by [`same_email`]: the team API and SSO's first
//! sign-in, through [`State::create_user`]. The operator, who may declare one person in several
//! organisations, is refused an address that another organisation's undeclared user holds, at
//! start and at each reload ([`State::check_declarations`]).

use super::{decode, State, WriteGuard, WRITE_LOCK_TTL, WRITE_LOCK_WAIT};
use crate::config::{same_email, Config, ConfigError};
use crate::data::model::User;
use crate::data::store::{Kind, StoreError};
use std::sync::Arc;

/// The store's lock that makes the check of an address and the user's save one step across
/// instances.
const NEW_USERS_LOCK: &str = "new-users";

/// Why a user is not made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NewUserError {
    /// A user of another organisation holds the address. The message names no organisation:
    /// whether an address is taken is all the caller learns.
    #[error("a user of another organisation has this e-mail address: an address belongs to one organisation")]
    EmailElsewhere,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whether `u` is a user other than `except`, of an organisation other than `org_id`, with
/// the address `email`.
fn holds_elsewhere(u: &User, email: &str, org_id: &str, except: &str) -> bool {
    u.org_id != org_id && u.id != except && same_email(&u.email, email)
}

impl State {
    /// Saves a new user unless a user of another organisation holds its e-mail address. The
    /// check and the save hold a lock of their own (on a shared store, the store's, and the
    /// users are then read from the store), so two organisations giving themselves one address
    /// at once, on one instance or two, cannot both succeed.
    pub(crate) async fn create_user(&self, user: User) -> Result<Arc<User>, NewUserError> {
        let local = self.new_users_lock.lock().await;
        let token = self.store.lock(NEW_USERS_LOCK, WRITE_LOCK_TTL, WRITE_LOCK_WAIT).await?;
        let guard = WriteGuard { _local: local, shared: token.map(|t| (self.store.clone(), NEW_USERS_LOCK.into(), t)) };
        let taken = if guard.shared.is_some() {
            let mut taken = false;
            for (id, body) in self.store.load_all(Kind::User).await? {
                taken |= holds_elsewhere(&decode(Kind::User, &id, &body)?, &user.email, &user.org_id, &user.id);
            }
            taken
        } else {
            !self.users_where(|u| holds_elsewhere(u, &user.email, &user.org_id, &user.id)).is_empty()
        };
        if taken {
            return Err(NewUserError::EmailElsewhere);
        }
        Ok(self.save_user(user).await?)
    }

    /// Refuses a configuration whose `users:` would give a user an address that a user of
    /// another organisation holds who is not declared (one made through the API or SSO), naming
    /// `users[i].email`. The operator may declare one person in several organisations (they sign
    /// in there by password, SAML or a provider naming the organisation); a tenant's user is not
    /// theirs to share. A declared user that already has its address in its organisation keeps
    /// it (it may predate the rule), so a start never fails on what the last one applied.
    pub(crate) fn check_declarations(&self, config: &Config) -> Result<(), ConfigError> {
        let declared = |u: &User| config.users.iter().any(|d| d.id == u.id);
        for (i, u) in config.users.iter().enumerate() {
            let kept =
                self.user(&u.id).is_some_and(|prev| prev.org_id == u.organization && same_email(&prev.email, &u.email));
            if kept {
                continue;
            }
            let tenants = self
                .users_where(|x| !x.declared && !declared(x) && holds_elsewhere(x, &u.email, &u.organization, &u.id));
            if let Some(holder) = tenants.first() {
                return Err(ConfigError::Invalid {
                    field: format!("users[{i}].email"),
                    message: format!(
                        "`{}` is the address of user {} of organization `{}`: an e-mail address belongs to one \
                         organisation (remove that user, or declare another address)",
                        u.email.trim(),
                        holder.id,
                        holder.org_id
                    ),
                });
            }
        }
        Ok(())
    }
}
