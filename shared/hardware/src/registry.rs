//! Managers by component type.

use std::collections::BTreeMap;
use std::sync::Arc;

use flow_rules::ComponentType;

use crate::{Capability, ComponentManager, HardwareError};

/// The managers a worker has, one per component type.
#[derive(Clone, Default)]
pub struct ManagerRegistry {
    managers: BTreeMap<ComponentType, Arc<dyn ComponentManager>>,
}

impl ManagerRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the manager for its descriptor's type (replacing any).
    pub fn register(&mut self, manager: Arc<dyn ComponentManager>) {
        self.managers
            .insert(manager.descriptor().component_type, manager);
    }

    /// The manager for a type.
    pub fn get(
        &self,
        component_type: ComponentType,
    ) -> Result<&Arc<dyn ComponentManager>, HardwareError> {
        self.managers
            .get(&component_type)
            .ok_or(HardwareError::NoManager { component_type })
    }

    /// The manager for a type, checked for a capability.
    pub fn capable(
        &self,
        component_type: ComponentType,
        capability: Capability,
    ) -> Result<&Arc<dyn ComponentManager>, HardwareError> {
        let manager = self.get(component_type)?;
        manager.descriptor().require(capability)?;
        Ok(manager)
    }

    /// Closes every manager ([`ComponentManager::close`]).
    pub async fn close_all(&self) {
        for manager in self.managers.values() {
            manager.close().await;
        }
    }

    /// The types with a manager.
    pub fn types(&self) -> impl Iterator<Item = ComponentType> + '_ {
        self.managers.keys().copied()
    }
}
