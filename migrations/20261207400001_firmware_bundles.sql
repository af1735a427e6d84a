-- The firmware bundle catalog (issue 42, docs/firmware.md): a bundle is a
-- named, versioned set of images, one per component type and sub-target,
-- each with its version, origin URL, sha256 digest and size. Published once
-- and immutable: only a bundle's retirement may change.
CREATE TABLE firmware_bundles (
    name          text NOT NULL,
    version       text NOT NULL,
    models        text[] NOT NULL DEFAULT '{}',
    published_by  text NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now(),
    retired_at    timestamptz,
    PRIMARY KEY (name, version)
);

CREATE TABLE firmware_images (
    bundle          text NOT NULL,
    bundle_version  text NOT NULL,
    component_type  text NOT NULL,
    -- '' for the component's main firmware
    sub_target      text NOT NULL DEFAULT '',
    image_version   text NOT NULL,
    url             text NOT NULL,
    digest          text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size            bigint NOT NULL CHECK (size > 0),
    PRIMARY KEY (bundle, bundle_version, component_type, sub_target),
    FOREIGN KEY (bundle, bundle_version) REFERENCES firmware_bundles (name, version)
        ON DELETE RESTRICT
);

-- Restores look bundles up by the version an image installs.
CREATE INDEX firmware_images_by_version ON firmware_images (component_type, sub_target, image_version);

-- Immutable once published: an image never changes or goes; a bundle's
-- name, version, models and publication never change (its retirement may).
CREATE FUNCTION firmware_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'firmware_bundles' AND TG_OP = 'UPDATE'
       AND NEW.name = OLD.name AND NEW.version = OLD.version
       AND NEW.models = OLD.models AND NEW.published_by = OLD.published_by
       AND NEW.published_at = OLD.published_at THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'firmware bundles are immutable once published (% on %)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE TRIGGER firmware_bundles_immutable BEFORE UPDATE OR DELETE ON firmware_bundles
    FOR EACH ROW EXECUTE FUNCTION firmware_refuse_change();
CREATE TRIGGER firmware_images_immutable BEFORE UPDATE OR DELETE ON firmware_images
    FOR EACH ROW EXECUTE FUNCTION firmware_refuse_change();
