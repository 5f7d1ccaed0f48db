// A chat's files in its timeline. A file shows once: on the message that took it (its chip, and
// an image as itself); only a file no message names (uploaded by another client, say) shows as a
// bubble of its own.

import { useEffect, useState } from "preact/hooks";
import type { Client, FileRef } from "./api";
import { humanSize } from "./composer";
import { Paperclip } from "./icons";
import { relative } from "./time";
import type { Item } from "./timeline";
import type { Notify } from "./toasts";

interface FileProps {
  file: FileRef;
  client: Client;
  sessionId: string;
  notify: Notify;
}

/** The files the timeline shows on their messages (or that the composer holds for one), by id. */
export function filesOnMessages(items: Item[], held: ReadonlySet<string>): Set<string> {
  const ids = new Set(held);
  for (const item of items) if (item.kind === "user") for (const f of item.files ?? []) ids.add(f.id);
  return ids;
}

/** The file each upload replaced, by the upload's id. */
export function replacements(items: Item[]): Map<string, string> {
  const replaced = new Map<string, string>();
  for (const item of items) if (item.kind === "file" && item.replaces) replaced.set(item.file.id, item.replaces);
  return replaced;
}

/** A chip that downloads a chat's file (fetched with the token, saved under its name). */
export function FileButton({ file, client, sessionId, notify }: FileProps) {
  const download = async () => {
    try {
      const url = URL.createObjectURL(await client.fileBlob(sessionId, file.id));
      const a = document.createElement("a");
      a.href = url;
      a.download = file.filename;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (e) {
      notify.error(e);
    }
  };
  return (
    <button type="button" class="file-chip" title={`Download ${file.filename}`} onClick={() => void download()}>
      <Paperclip /> {file.filename} <span class="file-size">{humanSize(file.size)}</span>
    </button>
  );
}

/** An image file as itself (fetched with the token); nothing for other files. */
function ImagePreview({ file, client, sessionId }: Omit<FileProps, "notify">) {
  const [preview, setPreview] = useState<string | null>(null);
  const image = file.content_type.startsWith("image/");
  useEffect(() => {
    if (!image) return;
    let url: string | null = null;
    let live = true;
    client.fileBlob(sessionId, file.id).then(
      (blob) => {
        if (!live) return;
        url = URL.createObjectURL(blob);
        setPreview(url);
      },
      () => setPreview(null),
    );
    return () => {
      live = false;
      if (url) URL.revokeObjectURL(url);
    };
  }, [client, sessionId, file.id, image]);
  return preview ? <img class="file-preview" src={preview} alt={file.filename} /> : null;
}

/** A file with its chip, what it replaced, and the image itself for an image. */
function FileView({ replaces, ...props }: FileProps & { replaces?: string }) {
  return (
    <>
      <FileButton {...props} />
      {replaces && <span class="badge">replaces the earlier {props.file.filename}</span>}
      <ImagePreview file={props.file} client={props.client} sessionId={props.sessionId} />
    </>
  );
}

/** A message's files. */
export function MessageFiles({ files, replaced, ...rest }: Omit<FileProps, "file"> & { files: FileRef[]; replaced: Map<string, string> }) {
  return (
    <ul class="message-files" aria-label="Files of this message">
      {files.map((f) => (
        <li key={f.id} aria-label={`File ${f.filename}`}>
          <FileView file={f} replaces={replaced.get(f.id)} {...rest} />
        </li>
      ))}
    </ul>
  );
}

/** An upload no message names, as a bubble of its own. */
export function FileCard({ item, now, ...rest }: Omit<FileProps, "file"> & { item: Extract<Item, { kind: "file" }>; now: number }) {
  const { file } = item;
  return (
    <li class="message user file" aria-label={`File ${file.filename}`}>
      <div class="bubble">
        <FileView file={file} replaces={item.replaces} {...rest} />
      </div>
      <time dateTime={item.ts}>{relative(item.ts, now)}</time>
    </li>
  );
}
