#!/usr/bin/env python3
"""Checks one flow-rack-sim BMC with DMTF's Python `redfish` library, an
independent Redfish client.

Usage: redfish_client_check.py <bmc_base_url> <user> <password>

Walks the service root, Systems, Chassis and Managers; reads PowerState;
posts a ComputerSystem.Reset (and a refused one); posts a SimpleUpdate and
follows its task to completion; reads the firmware inventory. Exits 0 and
prints "ok" when everything matches, exits 1 with a message otherwise.
Expects a compute or NVSwitch tray BMC whose host is On or Off (not in
transition) and whose firmware is not being updated.
"""

import sys
import time

import redfish
from redfish.rest.v1 import InvalidCredentialsError

DEADLINE_SECONDS = 30
POLL_SECONDS = 0.02
IMAGE_URI = "http://images.invalid/flow/firmware-99.1-7.bin"
NEW_VERSION = "99.1-7"


class Mismatch(Exception):
    """What the BMC did differs from what Redfish (or the simulator) promises."""


def expect(condition, message):
    if not condition:
        raise Mismatch(message)


def get(client, path):
    response = client.get(path)
    expect(response.status == 200, f"GET {path}: HTTP {response.status}: {response.text}")
    body = response.dict
    for key in ("@odata.id", "@odata.type"):
        expect(key in body, f"GET {path}: no {key} in {body}")
    return body


def members(client, path):
    collection = get(client, path)
    items = collection.get("Members")
    expect(isinstance(items, list), f"{path}: Members is not a list: {collection}")
    expect(
        collection.get("Members@odata.count") == len(items),
        f"{path}: Members@odata.count {collection.get('Members@odata.count')} != {len(items)}",
    )
    return [get(client, item["@odata.id"]) for item in items]


def wait_for(what, probe):
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        value = probe()
        if value is not None:
            return value
        expect(time.monotonic() < deadline, f"timed out after {DEADLINE_SECONDS}s waiting for {what}")
        time.sleep(POLL_SECONDS)


def message_id(response):
    try:
        return response.dict["error"]["@Message.ExtendedInfo"][0]["MessageId"]
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def check_credentials(base_url, user, password):
    wrong = redfish.redfish_client(
        base_url=base_url, username=user, password=password + "-wrong", default_prefix="/redfish/v1", timeout=10
    )
    try:
        wrong.login(auth="basic")
    except InvalidCredentialsError:
        return
    raise Mismatch("a wrong password was accepted")


def check_power(client, system):
    path = system["@odata.id"]
    state = system.get("PowerState")
    expect(state in ("On", "Off"), f"{path}: PowerState {state!r}")
    action = system.get("Actions", {}).get("#ComputerSystem.Reset")
    expect(action is not None, f"{path}: no #ComputerSystem.Reset action")
    allowed = action.get("ResetType@Redfish.AllowableValues", [])
    value, final = ("ForceOff", "Off") if state == "On" else ("On", "On")
    expect(value in allowed, f"{path}: {value} not in AllowableValues {allowed}")

    refused = client.post(action["target"], body={"ResetType": "NotAResetType"})
    expect(refused.status == 400, f"bogus ResetType: HTTP {refused.status}")
    expect(
        (message_id(refused) or "").endswith("ActionParameterValueNotInList"),
        f"bogus ResetType: MessageId {message_id(refused)!r}",
    )

    response = client.post(action["target"], body={"ResetType": value})
    expect(response.status == 204, f"ResetType {value}: HTTP {response.status}: {response.text}")
    wait_for(
        f"PowerState {final}",
        lambda: True if get(client, path).get("PowerState") == final else None,
    )


def check_update(client, root):
    service = get(client, root["UpdateService"]["@odata.id"])
    expect(service.get("ServiceEnabled") is True, "UpdateService is not enabled")
    action = service.get("Actions", {}).get("#UpdateService.SimpleUpdate")
    expect(action is not None, "UpdateService has no #UpdateService.SimpleUpdate action")
    inventory_path = service["FirmwareInventory"]["@odata.id"]
    before = {item["Id"]: item.get("Version") for item in members(client, inventory_path)}
    expect(before, "the firmware inventory is empty")

    response = client.post(action["target"], body={"ImageURI": IMAGE_URI, "TransferProtocol": "HTTP"})
    expect(response.is_processing, f"SimpleUpdate: HTTP {response.status} (expected 202): {response.text}")
    location = response.task_location
    expect(location, "SimpleUpdate: 202 without Location")
    first = response.monitor(client)
    expect(first.status == 200, f"GET {location}: HTTP {first.status}")
    expect(first.dict.get("@odata.type", "").startswith("#Task."), f"not a Task: {first.dict}")

    def finished():
        task = get(client, location)
        state = task.get("TaskState")
        expect(state in ("New", "Running", "Completed", "Exception"), f"TaskState {state!r}")
        return task if state in ("Completed", "Exception") else None

    task = wait_for("the update task to finish", finished)
    expect(task["TaskState"] == "Completed", f"task ended {task['TaskState']}: {task.get('Messages')}")
    expect(task.get("PercentComplete") == 100, f"PercentComplete {task.get('PercentComplete')}")
    after = {item["Id"]: item.get("Version") for item in members(client, inventory_path)}
    changed = [member for member, version in after.items() if version != before.get(member)]
    expect(len(changed) == 1, f"expected one member to change, got {changed}: {before} -> {after}")
    expect(after[changed[0]] == NEW_VERSION, f"{changed[0]} is {after[changed[0]]}, expected {NEW_VERSION}")


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    base_url, user, password = argv[1:4]
    client = redfish.redfish_client(
        base_url=base_url, username=user, password=password, default_prefix="/redfish/v1", timeout=10
    )
    client.login(auth="basic")
    try:
        check_credentials(base_url, user, password)
        root = get(client, "/redfish/v1")
        expect(root.get("RedfishVersion"), "service root has no RedfishVersion")
        for link in ("Systems", "Chassis", "Managers", "UpdateService", "Tasks"):
            expect("@odata.id" in root.get(link, {}), f"service root has no {link} link")
        systems = members(client, root["Systems"]["@odata.id"])
        expect(len(systems) == 1, f"expected one system, got {len(systems)}")
        chassis = members(client, root["Chassis"]["@odata.id"])
        expect(chassis and all("ChassisType" in c for c in chassis), "chassis without ChassisType")
        managers = members(client, root["Managers"]["@odata.id"])
        expect(managers and all(m.get("ManagerType") == "BMC" for m in managers), "no BMC manager")
        tasks = get(client, root["Tasks"]["@odata.id"])
        expect("@odata.id" in tasks.get("Tasks", {}), "TaskService has no Tasks link")
        check_power(client, systems[0])
        check_update(client, root)
    except Mismatch as mismatch:
        print(f"redfish_client_check: {base_url}: {mismatch}", file=sys.stderr)
        return 1
    finally:
        client.logout()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
