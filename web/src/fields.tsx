// Form controls the views share.

/** What one option of an [`OptionalSelect`] says, and whether it can be picked. */
export interface OptionView {
  label: string;
  /** Why it is marked (shown as its tooltip). */
  reason?: string;
  /** It cannot be picked. */
  disabled?: boolean;
}

/** A labelled choice among `options`, or none (`null`, shown as `none`). */
export function OptionalSelect<T extends string>(props: {
  label: string;
  /** The label is read by screen readers only (a compact header). */
  hideLabel?: boolean;
  value: T | null;
  options: readonly T[];
  none: string;
  /** How each option shows (by default, as itself). */
  describe?: (option: T) => OptionView;
  /** The id of what describes the choice (a note beside it). */
  describedBy?: string;
  onChange: (value: T | null) => void;
}) {
  const { label, hideLabel, value, options, none, describe, describedBy, onChange } = props;
  return (
    <label>
      {hideLabel ? <span class="visually-hidden">{label}</span> : label}
      <select
        value={value ?? ""}
        aria-describedby={describedBy}
        onChange={(e) => onChange((e.currentTarget.value || null) as T | null)}
      >
        <option value="">{none}</option>
        {options.map((o) => {
          const view = describe?.(o) ?? { label: o };
          return (
            <option key={o} value={o} title={view.reason} disabled={view.disabled}>
              {view.label}
            </option>
          );
        })}
      </select>
    </label>
  );
}
