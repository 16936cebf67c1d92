//! What each route needs, declared once. The API's router is built from the same table
//! (`api::routes`), and the authorization layer refuses a request to a route it finds no rule
//! for, so a route cannot be added without deciding who may call it.

use super::Role;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Anyone, signed in or not (signing in).
    Public,
    /// Anyone signed in (their own session and tokens).
    SignedIn,
    /// Viewers and up; what they see is scoped by their job-type patterns.
    Read,
    /// Operators and up; what they change is scoped by their job-type patterns.
    Write,
    /// Admins only.
    Admin,
}

impl Rule {
    /// The least role the rule lets in (`None`: no sign-in needed).
    pub fn least_role(self) -> Option<Role> {
        match self {
            Rule::Public => None,
            Rule::SignedIn | Rule::Read => Some(Role::Viewer),
            Rule::Write => Some(Role::Operator),
            Rule::Admin => Some(Role::Admin),
        }
    }

    /// Whether `role` may call a route with this rule.
    pub fn allows(self, role: Role) -> bool {
        self.least_role().is_none_or(|least| role >= least)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_what_they_may_do() {
        assert!(Rule::Read.allows(Role::Viewer));
        assert!(!Rule::Write.allows(Role::Viewer));
        assert!(Rule::Write.allows(Role::Operator));
        assert!(!Rule::Admin.allows(Role::Operator));
        assert!(Rule::Admin.allows(Role::Admin));
        assert!(Rule::Public.allows(Role::Viewer));
    }
}
