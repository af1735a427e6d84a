//! The Redfish URL space of one BMC as a typed [`Route`], parsed once per
//! request against the BMC's kind.

use axum::http::Method;

use crate::model::{PowerResource, Profile, SHELF_POWER_SUPPLIES};
use crate::vendor::{BACKPLANE_CHASSIS, DPU_SYSTEM, Ids, VendorProfile};

/// Prefix of every Redfish resource.
pub(crate) const ROOT: &str = "/redfish/v1";

/// A resource or action of one BMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/redfish`: the version document.
    Versions,
    /// `/redfish/v1`.
    ServiceRoot,
    /// `/redfish/v1/Systems`.
    Systems,
    /// `/redfish/v1/Systems/<id>`.
    System,
    /// `…/Actions/ComputerSystem.Reset`.
    SystemReset,
    /// `/redfish/v1/Chassis`.
    ChassisCollection,
    /// `/redfish/v1/Chassis/<id>`.
    Chassis,
    /// `…/Actions/Chassis.Reset` (shelves).
    ChassisReset,
    /// `…/PowerSubsystem` (shelves).
    PowerSubsystem,
    /// `…/PowerSubsystem/PowerSupplies` (shelves).
    PowerSupplies,
    /// `…/PowerSubsystem/PowerSupplies/<n>` (shelves).
    PowerSupply(u8),
    /// `…/PowerSubsystem/PowerSupplies/<n>/Metrics` (shelves).
    PowerSupplyMetrics(u8),
    /// `/redfish/v1/Chassis/<id>/EnvironmentMetrics`: the draw.
    EnvironmentMetrics,
    /// `/redfish/v1/Managers`.
    Managers,
    /// `/redfish/v1/Managers/<id>`.
    Manager,
    /// `/redfish/v1/UpdateService`.
    UpdateService,
    /// `…/Actions/UpdateService.SimpleUpdate`.
    SimpleUpdate,
    /// `/redfish/v1/UpdateService/FirmwareInventory`.
    FirmwareInventory,
    /// `/redfish/v1/UpdateService/FirmwareInventory/<id>`.
    FirmwareMember(&'static str),
    /// `/redfish/v1/TaskService`.
    TaskService,
    /// `/redfish/v1/TaskService/Tasks`.
    Tasks,
    /// `/redfish/v1/TaskService/Tasks/<n>` (may not exist).
    Task(u32),
    /// `/redfish/v1/EventService` (BMCs with one).
    EventService,
    /// `/redfish/v1/EventService/SSE`: the event stream.
    EventStream,
    /// `/redfish/v1/EventService/Subscriptions`: one EventDestination per
    /// open event stream (GET only: no push subscriptions).
    Subscriptions,
    /// `/redfish/v1/EventService/Subscriptions/<n>` (may not exist): GET,
    /// DELETE ends its stream.
    Subscription(u64),
    /// `…/ResetActionInfo` of the power resource (`action-info`).
    ResetActionInfo,
    /// `/redfish/v1/Systems/DPU_0` (`multi-system` trays).
    DpuSystem,
    /// `…/DPU_0/Actions/ComputerSystem.Reset`.
    DpuReset,
    /// `/redfish/v1/Chassis/Backplane_0` (`multi-system` shelves).
    BackplaneChassis,
    /// `/redfish/v1/$metadata` (CSDL, public).
    Metadata,
    /// `/redfish/v1/odata`: the OData service document (public).
    OData,
    /// `/redfish/v1/SessionService`.
    SessionService,
    /// `/redfish/v1/SessionService/Sessions`: GET lists, POST logs in.
    Sessions,
    /// `/redfish/v1/SessionService/Sessions/<n>`: GET, DELETE logs out.
    Session(u64),
    /// `/redfish/v1/SessionService/Sessions/Members`: POST logs in, as on
    /// the collection (DSP0266 lets a client create a member by a POST to
    /// the collection's `Members`).
    SessionsMembers,
}

impl Route {
    /// The route of `path` (no query, trailing slash already removed) on a
    /// BMC of this kind, with these ids and vendor profile, if it has one.
    pub(crate) fn parse(
        path: &str,
        profile: &Profile,
        ids: &Ids,
        vendor: VendorProfile,
    ) -> Option<Route> {
        if path == "/redfish" {
            return Some(Route::Versions);
        }
        let rest = path.strip_prefix(ROOT)?;
        let segments: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.strip_prefix('/')?.split('/').collect()
        };
        let is_system = |id: &str| ids.system.as_deref() == Some(id);
        let is_chassis = |id: &str| ids.chassis == id;
        let is_shelf = profile.power_resource == PowerResource::Chassis;
        let multi = vendor == VendorProfile::MultiSystem;
        let info = vendor == VendorProfile::ActionInfo;
        Some(match segments.as_slice() {
            [] => Route::ServiceRoot,
            ["$metadata"] => Route::Metadata,
            ["odata"] => Route::OData,
            ["Systems", id] if multi && !is_shelf && *id == DPU_SYSTEM => Route::DpuSystem,
            ["Systems", id, "Actions", "ComputerSystem.Reset"]
                if multi && !is_shelf && *id == DPU_SYSTEM =>
            {
                Route::DpuReset
            }
            ["Chassis", id] if multi && is_shelf && *id == BACKPLANE_CHASSIS => {
                Route::BackplaneChassis
            }
            ["Systems", id, "ResetActionInfo"] if info && is_system(id) => Route::ResetActionInfo,
            ["Chassis", id, "ResetActionInfo"] if info && is_shelf && is_chassis(id) => {
                Route::ResetActionInfo
            }
            ["Systems"] => Route::Systems,
            ["Systems", id] if is_system(id) => Route::System,
            ["Systems", id, "Actions", "ComputerSystem.Reset"] if is_system(id) => {
                Route::SystemReset
            }
            ["Chassis"] => Route::ChassisCollection,
            ["Chassis", id] if is_chassis(id) => Route::Chassis,
            ["Chassis", id, "Actions", "Chassis.Reset"] if is_chassis(id) && is_shelf => {
                Route::ChassisReset
            }
            ["Chassis", id, "PowerSubsystem"] if is_chassis(id) && is_shelf => {
                Route::PowerSubsystem
            }
            ["Chassis", id, "PowerSubsystem", "PowerSupplies"] if is_chassis(id) && is_shelf => {
                Route::PowerSupplies
            }
            ["Chassis", id, "PowerSubsystem", "PowerSupplies", n] if is_chassis(id) && is_shelf => {
                let n: u8 = canonical_number(n)?;
                if n >= SHELF_POWER_SUPPLIES {
                    return None;
                }
                Route::PowerSupply(n)
            }
            [
                "Chassis",
                id,
                "PowerSubsystem",
                "PowerSupplies",
                n,
                "Metrics",
            ] if is_chassis(id) && is_shelf => {
                let n: u8 = canonical_number(n)?;
                if n >= SHELF_POWER_SUPPLIES {
                    return None;
                }
                Route::PowerSupplyMetrics(n)
            }
            ["Chassis", id, "EnvironmentMetrics"] if is_chassis(id) => Route::EnvironmentMetrics,
            ["Managers"] => Route::Managers,
            ["Managers", id] if *id == ids.manager => Route::Manager,
            ["UpdateService"] => Route::UpdateService,
            ["UpdateService", "Actions", "UpdateService.SimpleUpdate"] => Route::SimpleUpdate,
            ["UpdateService", "FirmwareInventory"] => Route::FirmwareInventory,
            ["UpdateService", "FirmwareInventory", id] => {
                Route::FirmwareMember(profile.firmware.iter().find(|f| f.id == *id)?.id)
            }
            ["TaskService"] => Route::TaskService,
            ["SessionService"] => Route::SessionService,
            ["SessionService", "Sessions"] => Route::Sessions,
            ["SessionService", "Sessions", "Members"] => Route::SessionsMembers,
            ["SessionService", "Sessions", n] => Route::Session(canonical_number(n)?),
            ["EventService"] if profile.event_service => Route::EventService,
            ["EventService", "SSE"] if profile.event_service => Route::EventStream,
            ["EventService", "Subscriptions"] if profile.event_service => Route::Subscriptions,
            ["EventService", "Subscriptions", n] if profile.event_service => {
                Route::Subscription(canonical_number(n)?)
            }
            ["TaskService", "Tasks"] => Route::Tasks,
            ["TaskService", "Tasks", n] => Route::Task(canonical_number(n)?),
            _ => return None,
        })
    }

    /// The methods the route takes (the first is its main one).
    pub(crate) fn methods(self) -> &'static [Method] {
        match self {
            Route::SystemReset
            | Route::ChassisReset
            | Route::DpuReset
            | Route::SimpleUpdate
            | Route::SessionsMembers => &[Method::POST],
            Route::Sessions => &[Method::GET, Method::POST],
            Route::Session(_) | Route::Subscription(_) => &[Method::GET, Method::DELETE],
            _ => &[Method::GET],
        }
    }

    /// The `Allow` header of the route.
    pub(crate) fn allow(self) -> String {
        let names: Vec<&str> = self.methods().iter().map(Method::as_str).collect();
        names.join(", ")
    }

    /// Whether a POST to it logs in (served without credentials).
    pub(crate) fn is_login(self) -> bool {
        matches!(self, Route::Sessions | Route::SessionsMembers)
    }

    /// Whether a GET of it is served without credentials.
    pub(crate) fn is_public(self) -> bool {
        matches!(
            self,
            Route::Versions | Route::ServiceRoot | Route::Metadata | Route::OData
        )
    }
}

/// A decimal number without sign or leading zeros (so each number has one URI).
fn canonical_number<T: std::str::FromStr>(text: &str) -> Option<T> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ComponentKind;

    fn route(path: &str, (kind, ids): &(&Profile, Ids)) -> Option<Route> {
        Route::parse(path, kind, ids, VendorProfile::Standard)
    }

    #[test]
    fn vendor_profiles_rename_and_add_resources() {
        let compute = ComponentKind::Compute.profile();
        let uuid = "f1000000-5140-4000-8000-000000000001";
        let ids = Ids::of(compute, VendorProfile::UuidIds, uuid);
        let parse = |p: &str, v| Route::parse(p, compute, &Ids::of(compute, v, uuid), v);
        assert_eq!(
            Route::parse(
                &format!("/redfish/v1/Systems/{uuid}"),
                compute,
                &ids,
                VendorProfile::UuidIds
            ),
            Some(Route::System)
        );
        assert_eq!(
            parse("/redfish/v1/Systems/System_0", VendorProfile::UuidIds),
            None
        );
        assert_eq!(
            parse("/redfish/v1/Systems/DPU_0", VendorProfile::MultiSystem),
            Some(Route::DpuSystem)
        );
        assert_eq!(
            parse("/redfish/v1/Systems/DPU_0", VendorProfile::Standard),
            None
        );
        assert_eq!(
            parse(
                "/redfish/v1/Systems/System_0/ResetActionInfo",
                VendorProfile::ActionInfo
            ),
            Some(Route::ResetActionInfo)
        );
        assert_eq!(
            parse(
                "/redfish/v1/Systems/System_0/ResetActionInfo",
                VendorProfile::Standard
            ),
            None
        );
    }

    #[test]
    fn routes_depend_on_the_kind() {
        let compute_kind = ComponentKind::Compute.profile();
        let shelf_kind = ComponentKind::PowerShelf.profile();
        let compute = (
            compute_kind,
            Ids::of(compute_kind, VendorProfile::Standard, "u"),
        );
        let shelf = (
            shelf_kind,
            Ids::of(shelf_kind, VendorProfile::Standard, "u"),
        );
        let compute = &compute;
        let shelf = &shelf;
        assert_eq!(route("/redfish/v1", compute), Some(Route::ServiceRoot));
        assert_eq!(
            route(
                "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset",
                compute
            ),
            Some(Route::SystemReset)
        );
        assert_eq!(route("/redfish/v1/Systems/System_0", shelf), None);
        assert_eq!(
            route(
                "/redfish/v1/Chassis/powershelf/PowerSubsystem/PowerSupplies/5",
                shelf
            ),
            Some(Route::PowerSupply(5))
        );
        assert_eq!(
            route(
                "/redfish/v1/Chassis/powershelf/PowerSubsystem/PowerSupplies/6",
                shelf
            ),
            None
        );
        assert_eq!(
            route("/redfish/v1/Chassis/BMC_0/PowerSubsystem", compute),
            None
        );
        assert_eq!(
            route("/redfish/v1/UpdateService/FirmwareInventory/UEFI", compute),
            Some(Route::FirmwareMember("UEFI"))
        );
        assert_eq!(
            route("/redfish/v1/UpdateService/FirmwareInventory/UEFI", shelf),
            None
        );
        assert_eq!(route("/redfish/v1/TaskService/Tasks/007", compute), None);
        assert_eq!(
            route("/redfish/v1/TaskService/Tasks/7", compute),
            Some(Route::Task(7))
        );
        assert_eq!(
            route("/redfish/v1/SessionService/Sessions/Members", shelf),
            Some(Route::SessionsMembers)
        );
        assert_eq!(
            route("/redfish/v1/EventService/Subscriptions/3", compute),
            Some(Route::Subscription(3))
        );
        assert_eq!(route("/redfish/v1/EventService/Subscriptions", shelf), None);
        assert_eq!(route("/redfish/v1x", compute), None);
        assert_eq!(route("/other", compute), None);
    }
}
