#!/usr/bin/python3
# Stand-ins for UPower, NetworkManager and logind on a private D-Bus bus, for the condition tests: the same names,
# object paths, interfaces and properties the daemon reads, each service on a connection of its own so that stopping
# it makes it leave the bus (NameOwnerChanged) as a real service's exit does.
#
# Usage: condition_services.py --address ADDRESS [--lifetime SECONDS]
# Commands on stdin, one per line; each answers one line on stdout ("ok ..." or "error ..."):
#   start SERVICE                  connect, export the objects, take the name (upower, networkmanager, logind)
#   stop SERVICE                   release the name and close the connection
#   set SERVICE PROPERTY VALUE     change a property and emit PropertiesChanged (upower's display device is
#                                  "display": set display WarningLevel 3)
#   invalidate SERVICE PROPERTY VALUE
#                                  change a property and announce it as invalidated, without its value
# It exits at end of input or after --lifetime seconds, whichever comes first.
import argparse
import sys

import dbus
import dbus.bus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

PROPERTIES = "org.freedesktop.DBus.Properties"

# Each service: its name, and its objects with their interface and properties (D-Bus typed).
SERVICES = {
    "upower": (
        "org.freedesktop.UPower",
        {
            "/org/freedesktop/UPower": (
                "org.freedesktop.UPower",
                {"OnBattery": dbus.Boolean(False), "DaemonVersion": dbus.String("1.90.0")},
            ),
            "/org/freedesktop/UPower/devices/DisplayDevice": (
                "org.freedesktop.UPower.Device",
                {
                    "IsPresent": dbus.Boolean(True),
                    "WarningLevel": dbus.UInt32(1),
                    "Percentage": dbus.Double(80.0),
                    "Type": dbus.UInt32(2),
                },
            ),
        },
    ),
    "networkmanager": (
        "org.freedesktop.NetworkManager",
        {
            "/org/freedesktop/NetworkManager": (
                "org.freedesktop.NetworkManager",
                {"Metered": dbus.UInt32(2), "State": dbus.UInt32(70)},
            ),
        },
    ),
    "logind": (
        "org.freedesktop.login1",
        {
            "/org/freedesktop/login1": (
                "org.freedesktop.login1.Manager",
                {"IdleHint": dbus.Boolean(False), "IdleSinceHint": dbus.UInt64(0)},
            ),
        },
    ),
}

# Where "set display ..." goes.
ALIASES = {"display": ("upower", "/org/freedesktop/UPower/devices/DisplayDevice")}


class PropertyObject(dbus.service.Object):
    """One object: org.freedesktop.DBus.Properties over a dictionary of typed values."""

    def __init__(self, connection, path, interface, values):
        super().__init__(connection, path)
        self.interface = interface
        self.values = dict(values)

    @dbus.service.method(PROPERTIES, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        if interface != self.interface or name not in self.values:
            raise dbus.exceptions.DBusException("no such property", name="org.freedesktop.DBus.Error.UnknownProperty")
        return self.values[name]

    @dbus.service.method(PROPERTIES, in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        if interface != self.interface:
            raise dbus.exceptions.DBusException("no such interface", name="org.freedesktop.DBus.Error.UnknownInterface")
        return dbus.Dictionary(self.values, signature="sv")

    @dbus.service.signal(PROPERTIES, signature="sa{sv}as")
    def PropertiesChanged(self, interface, changed, invalidated):
        pass


class Service:
    def __init__(self, address, key):
        self.name, objects = SERVICES[key]
        self.connection = dbus.bus.BusConnection(address)
        self.objects = {
            path: PropertyObject(self.connection, path, interface, values)
            for path, (interface, values) in objects.items()
        }
        self.connection.request_name(self.name, dbus.bus.NAME_FLAG_DO_NOT_QUEUE)

    def stop(self):
        self.connection.release_name(self.name)
        for obj in self.objects.values():
            obj.remove_from_connection()
        self.connection.close()


def typed_like(old, text):
    """The text as a value of the old value's D-Bus type."""
    if isinstance(old, dbus.Boolean):
        return dbus.Boolean(text in ("true", "1", "yes"))
    return type(old)(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--lifetime", type=int, default=120)
    args = parser.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    loop = GLib.MainLoop()
    running = {}

    def answer(line):
        print(line, flush=True)

    def command(words):
        if words[0] == "start" and len(words) == 2 and words[1] in SERVICES:
            if words[1] not in running:
                running[words[1]] = Service(args.address, words[1])
            return "ok started " + words[1]
        if words[0] == "stop" and len(words) == 2 and words[1] in running:
            running.pop(words[1]).stop()
            return "ok stopped " + words[1]
        if words[0] in ("set", "invalidate") and len(words) == 4:
            key, path = ALIASES.get(words[1], (words[1], None))
            if key not in running:
                return "error " + key + " is not running"
            service = running[key]
            obj = service.objects[path] if path else next(iter(service.objects.values()))
            value = typed_like(obj.values[words[2]], words[3])
            obj.values[words[2]] = value
            if words[0] == "set":
                obj.PropertiesChanged(obj.interface, dbus.Dictionary({words[2]: value}, signature="sv"),
                                      dbus.Array([], signature="s"))
            else:
                obj.PropertiesChanged(obj.interface, dbus.Dictionary({}, signature="sv"),
                                      dbus.Array([words[2]], signature="s"))
            return "ok " + " ".join(words)
        return "error unknown command: " + " ".join(words)

    def readable(source, condition):
        line = sys.stdin.readline()
        if not line:
            loop.quit()
            return False
        words = line.split()
        if words:
            try:
                answer(command(words))
            except Exception as error:  # a failed command is reported, the stand-ins go on
                answer("error " + str(error).replace("\n", " "))
        return True

    GLib.io_add_watch(sys.stdin, GLib.IO_IN | GLib.IO_HUP, readable)
    GLib.timeout_add_seconds(args.lifetime, loop.quit)
    answer("ready")
    loop.run()


if __name__ == "__main__":
    main()
